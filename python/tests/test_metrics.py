"""The client's metrics from Python: the Rust client's counts, translated
into a dict (`metrics()`) and rendered by the crate (`metrics_text()`),
agree with what the test did and with each other; and the
prometheus_client collector of docs/python.md, run as written."""

import re
from pathlib import Path

import pytest

import redislock
from redislock import NotAcquired, Redlock

DOCS = Path(__file__).resolve().parents[2] / "docs" / "python.md"
KINDS = ["exclusive", "shared", "permits", "set"]
OUTCOMES = ["granted", "refused", "timed_out", "error", "cancelled"]
SERVER_ERRORS = [
    "timeout", "connection_refused", "dns_failure", "connect_timeout", "unreachable",
    "auth_failed", "tls_failed", "module_missing", "error",
]
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")


def grant_refuse_release(rl, resource):
    """One exclusive lock granted, one refused without waiting (held by
    the first), then the first released."""
    lock = rl.try_lock(resource, ttl=10.0)
    with pytest.raises(NotAcquired):
        rl.try_lock(resource, ttl=10.0)
    held = rl.metrics()
    lock.release()
    return held


def series(name, *labels):
    """A series by its name and labels, whatever their order in the text."""
    return (name, tuple(sorted(labels)))


def samples(text):
    """Prometheus text as {series(name, (label, value), ...): value}."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, line
        name, labels, value = match.groups()
        pairs = tuple(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels or ""))
        out[series(name, *pairs)] = float(value)
    return out


def expected_samples(m):
    """The samples metrics_text() must hold for the dict `m`, by the
    metric list of docs/operations.md."""
    out = {}

    def histogram(name, labels, h):
        for le, n in h["buckets"]:
            out[(name + "_bucket", labels + (("le", repr(le)),))] = n
        out[(name + "_bucket", labels + (("le", "+Inf"),))] = h["count"]
        out[(name + "_sum", labels)] = h["sum"]
        out[(name + "_count", labels)] = h["count"]

    for kind, outcomes in m["acquisitions"].items():
        for outcome, h in outcomes.items():
            histogram("redlock_acquire_wait_seconds", (("kind", kind), ("outcome", outcome)), h)
    for kind, h in m["holds"].items():
        histogram("redlock_hold_seconds", (("kind", kind),), h)
    out[("redlock_held", ())] = m["held"]
    out[("redlock_waiting", ())] = m["waiting"]
    out[("redlock_extensions_total", (("result", "ok"),))] = m["extensions_ok"]
    out[("redlock_extensions_total", (("result", "failed"),))] = m["extensions_failed"]
    for cause, n in m["lost"].items():
        out[("redlock_lost_total", (("cause", cause),))] = n
    for s in m["servers"]:
        server = (("server", str(s["index"])), ("address", s["address"]))
        histogram("redlock_server_request_seconds", server, s["round_trip"])
        for kind, n in s["errors"].items():
            out[("redlock_server_errors_total", server + (("kind", kind),))] = n
        out[("redlock_server_identity_refusals_total", server)] = s["identity_refusals"]
        out[("redlock_server_quarantines_total", server)] = s["quarantines"]
    out[("redlock_election_leading", ())] = m["leading"]
    out[("redlock_election_term", ())] = m["term"]
    out[("redlock_election_leader_changes_total", ())] = m["leader_changes"]
    return out


def normalized(samples_by_key):
    """`le` labels as floats ("0.001" and "1" in the text, 0.001 and 1.0
    in Python), so both sides name a bucket alike."""
    out = {}
    for (name, labels), value in samples_by_key.items():
        out[series(name, *((k, float(v) if k == "le" and v != "+Inf" else v) for k, v in labels))] = value
    return out


def test_metrics_count_a_grant_a_refusal_and_a_release(servers, resource):
    rl = Redlock(servers.urls)
    while_held = grant_refuse_release(rl, resource)
    assert (while_held["held"], while_held["waiting"]) == (1, 0)
    m = rl.metrics()

    assert list(m["acquisitions"]) == KINDS
    for kind in KINDS:
        assert list(m["acquisitions"][kind]) == OUTCOMES
        for outcome in OUTCOMES:
            wanted = {("exclusive", "granted"): 1, ("exclusive", "refused"): 1}.get((kind, outcome), 0)
            assert m["acquisitions"][kind][outcome]["count"] == wanted, (kind, outcome)
    granted = m["acquisitions"]["exclusive"]["granted"]
    # Cumulative buckets, by rising bound, all within the count; the wait
    # took some time, under a minute.
    assert [le for le, _ in granted["buckets"]] == sorted(le for le, _ in granted["buckets"])
    assert all(isinstance(le, float) and isinstance(n, int) for le, n in granted["buckets"])
    counts = [n for _, n in granted["buckets"]]
    assert counts == sorted(counts) and counts[-1] == 1
    assert 0 < granted["sum"] < 60
    assert list(m["holds"]) == KINDS
    assert [m["holds"][k]["count"] for k in KINDS] == [1, 0, 0, 0]
    assert m["holds"]["exclusive"]["sum"] > 0
    assert (m["held"], m["waiting"]) == (0, 0)
    assert (m["extensions_ok"], m["extensions_failed"]) == (0, 0)
    assert m["lost"] == {"expired": 0, "refused": 0, "unreachable": 0, "revoked": 0}
    assert (m["leading"], m["term"], m["leader_changes"]) == (0, 0, 0)

    assert [s["index"] for s in m["servers"]] == [0, 1, 2, 3, 4]
    assert [s["address"] for s in m["servers"]] == rl.servers
    for s in m["servers"]:
        # Each server answered the grant, the refusal and the release.
        assert s["round_trip"]["count"] >= 3, s
        assert s["errors"] == dict.fromkeys(SERVER_ERRORS, 0)
        assert (s["identity_refusals"], s["quarantines"]) == (0, 0)

    # The asyncio twin shares the counts.
    assert rl.asyncio().metrics()["acquisitions"]["exclusive"]["refused"]["count"] == 1


def test_metrics_text_shows_the_same_counts(servers, resource):
    rl = Redlock(servers.urls)
    grant_refuse_release(rl, resource)
    # Nothing runs meanwhile: both read the same counts.
    m, text = rl.metrics(), rl.metrics_text()
    for line in [
        'redlock_acquire_wait_seconds_count{kind="exclusive",outcome="granted"} 1',
        'redlock_acquire_wait_seconds_count{kind="exclusive",outcome="refused"} 1',
        'redlock_acquire_wait_seconds_count{kind="shared",outcome="granted"} 0',
        'redlock_hold_seconds_count{kind="exclusive"} 1',
        "redlock_held 0",
    ]:
        assert line in text.splitlines(), line
    # Every sample of the text is a value of the dict, under its own name
    # and labels (a field translated into the wrong place differs here).
    assert normalized(samples(text)) == normalized(expected_samples(m))
    assert "# TYPE redlock_acquire_wait_seconds histogram" in text
    assert redislock.METRICS_CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_the_prometheus_client_collector_of_the_docs(servers, resource):
    """docs/python.md's collector, run as written: registered in the
    process's registry, as a user's would be."""
    pytest.importorskip("prometheus_client")
    from prometheus_client import generate_latest

    rl = Redlock(servers.urls)
    grant_refuse_release(rl, resource)
    block = next(b for b in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S) if "class RedlockCollector" in b)
    scope = {"rl": rl}
    exec(compile(block, str(DOCS), "exec"), scope)
    exposed = samples(generate_latest(scope["REGISTRY"]).decode())
    wait = "redlock_acquire_wait_seconds"
    assert exposed[series(wait + "_count", ("kind", "exclusive"), ("outcome", "granted"))] == 1
    assert exposed[series(wait + "_count", ("kind", "exclusive"), ("outcome", "refused"))] == 1
    assert exposed[series(wait + "_count", ("kind", "shared"), ("outcome", "granted"))] == 0
    assert exposed[series(wait + "_bucket", ("kind", "exclusive"), ("outcome", "granted"), ("le", "+Inf"))] == 1
    assert exposed[series("redlock_hold_seconds_count", ("kind", "exclusive"))] == 1
    assert exposed[series("redlock_lost_total", ("cause", "expired"))] == 0
    assert exposed[series("redlock_held")] == 0
    # The same counts as the crate's own text, series by series.
    own = samples(rl.metrics_text())
    for key in [k for k in own if k[0].startswith(("redlock_acquire_wait_seconds_count", "redlock_hold_seconds_count"))]:
        assert exposed[key] == own[key], key
