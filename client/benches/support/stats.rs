//! Figures both benches (`quorum.rs`, `rtt.rs`) compute the same way.
#![allow(dead_code)]

use hdrhistogram::Histogram;

/// A latency histogram in µs, up to 10 minutes.
pub fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 600_000_000, 3).map_err(|e| format!("histogram: {e}"))
}

/// The median of the finite values; `None` when there are none.
pub fn median_of(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

/// `a / b`, NaN (printed as such) when `b` is not positive.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}
