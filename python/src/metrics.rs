//! The client's metrics (`redlock::metrics::Snapshot`) as plain Python
//! values: `_Client.metrics()` is the snapshot's fields in a dict, each
//! list of (label, value) pairs a dict by label, in the crate's order;
//! `_Client.metrics_text()` is the crate's own Prometheus text. Nothing is
//! counted or rendered here.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use redlock::metrics::{HistogramSnapshot, ServerSnapshot, Snapshot};

/// ``{"buckets": [(le, count), ...], "count": n, "sum": seconds}``: the
/// cumulative buckets by upper bound in seconds, smallest first, without
/// ``+Inf`` (whose count is `count`).
fn histogram<'py>(py: Python<'py>, h: &HistogramSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("buckets", h.buckets.clone())?;
    dict.set_item("count", h.count)?;
    dict.set_item("sum", h.sum_seconds)?;
    Ok(dict)
}

/// `pairs` as a dict by label, in their order.
fn by_label<'py, T, V: IntoPyObject<'py>>(
    py: Python<'py>,
    pairs: impl IntoIterator<Item = T>,
    mut entry: impl FnMut(T) -> PyResult<(&'static str, V)>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for pair in pairs {
        let (label, value) = entry(pair)?;
        dict.set_item(label, value)?;
    }
    Ok(dict)
}

fn server<'py>(py: Python<'py>, s: &ServerSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("index", s.index)?;
    dict.set_item("address", &s.address)?;
    dict.set_item("round_trip", histogram(py, &s.round_trip)?)?;
    dict.set_item("errors", by_label(py, &s.errors, |(kind, n)| Ok((*kind, *n)))?)?;
    dict.set_item("identity_refusals", s.identity_refusals)?;
    dict.set_item("quarantines", s.quarantines)?;
    Ok(dict)
}

/// The dict of docs/python.md (Metrics): `acquisitions` by kind, then
/// outcome; `holds` by kind; `lost` by cause; `servers` in list order.
pub fn snapshot<'py>(py: Python<'py>, s: &Snapshot) -> PyResult<Bound<'py, PyDict>> {
    let acquisitions = PyDict::new(py);
    for a in &s.acquisitions {
        let by_outcome = match acquisitions.get_item(a.kind)? {
            Some(d) => d.cast_into::<PyDict>()?,
            None => {
                let d = PyDict::new(py);
                acquisitions.set_item(a.kind, &d)?;
                d
            }
        };
        by_outcome.set_item(a.outcome, histogram(py, &a.wait)?)?;
    }
    let dict = PyDict::new(py);
    dict.set_item("acquisitions", acquisitions)?;
    dict.set_item("holds", by_label(py, &s.holds, |(kind, h)| Ok((*kind, histogram(py, h)?)))?)?;
    dict.set_item("held", s.held)?;
    dict.set_item("waiting", s.waiting)?;
    dict.set_item("extensions_ok", s.extensions_ok)?;
    dict.set_item("extensions_failed", s.extensions_failed)?;
    dict.set_item("lost", by_label(py, &s.lost, |(cause, n)| Ok((*cause, *n)))?)?;
    let servers = s.servers.iter().map(|x| server(py, x)).collect::<PyResult<Vec<_>>>()?;
    dict.set_item("servers", servers)?;
    dict.set_item("leading", s.leading)?;
    dict.set_item("term", s.term)?;
    dict.set_item("leader_changes", s.leader_changes)?;
    Ok(dict)
}
