"""The partition scenarios (issue 33). Each builds its own topology (see
harness.py), runs clients (`redlock run` processes, `redislock` handles and
programs that speak RESP to a `redlock serve` of their own) against five
module servers while the network fails under them, and reads every hold
for overlaps, holds over a semaphore's limit, token inversions and stale
writes. Each returns one or more table rows (docs/safety.md,
"Partitions").

Times are seconds on CLOCK_MONOTONIC. Leases are 1 to 3 s where the lease
is the subject; every wait for the system is a poll for a condition with a
deadline, and the deadlines are generous (a loaded 2-core machine).
"""

import json
import os
import signal
import socket
import struct
import time

from harness import (LOCK_NET, Flapper, ScenarioFailed, Server, Topology, assert_safe, check, describe_hold, now, sh,
                     socket_in)

# Per-request and connect timeouts of every client: above the defaults
# (50 ms, 200 ms), so that a busy machine costs fewer retries; a partition
# still shows as a timeout within a tenth of a second.
SETTINGS = {"request_timeout": 0.1, "connect_timeout": 0.3}


def wait_until(cond, deadline, what, every=0.02):
    end = now() + deadline
    while True:
        got = cond()
        if got:
            return got
        if now() > end:
            raise ScenarioFailed(f"timed out after {deadline} s waiting for {what}")
        time.sleep(every)


def is_(ev, w=None, hid=None, **fields):
    """An event predicate."""

    def pred(e):
        if e["ev"] != ev or (w is not None and e.get("w") != w) or (hid is not None and e.get("id") != hid):
            return False
        return all(e.get(k) == v for k, v in fields.items())

    return pred


def granted(topo, w, hid, deadline, what):
    """The grant of an explicit hold (or `redlock run`); its refusal fails
    the scenario at once, with the client's reason."""
    e = topo.wait_event(lambda e: e["ev"] in ("granted", "failed", "cli_exit") and e["w"] == w.name
                        and e.get("id") == hid, deadline, what)
    if e["ev"] == "failed":
        raise ScenarioFailed(f"{what}: not granted: {e.get('message')}")
    if e["ev"] == "cli_exit":
        raise ScenarioFailed(f"{what}: redlock run exited {e['code']} without running its command: {e['stderr']}")
    return e


def hold_of(topo, w, hid, deadline=15):
    return topo.wait_event(is_("hold", w.name, hid), deadline, f"the hold record of {w.name}/{hid}")


def fence_state(topo, key):
    reply = topo.fence.call("HGETALL", "fence:" + key)
    st = {}
    for k, v in zip(reply[0::2], reply[1::2]):
        st[k.decode()] = v.decode()
    return st


class Extensions:
    """Counts extensions of `owner`'s hold on `res` seen on a server: its
    PTTL going up (it only goes down between extensions)."""

    def __init__(self, server, res, owner):
        self.server, self.res, self.owner = server, res, owner
        self.last = None
        self.count = 0

    def poll(self):
        info = self.server.lock_info(self.res)
        if info is None or info.get("owner") != self.owner:
            return self.count
        pttl = int(info["pttl"])
        if self.last is not None and pttl > self.last + 100:
            self.count += 1
        self.last = pttl
        return self.count


class LeaseEnds:
    """When `owner`'s lease ends on each server, from PTTL read over
    loopback in the server's namespace: the lease ends no earlier than
    (when the read was sent) + PTTL. Kept up to date by poll() while an
    extension may still land."""

    def __init__(self, servers, res, owner):
        self.servers, self.res, self.owner = servers, res, owner
        self.ends = {}

    def poll(self):
        for s in self.servers:
            sent = now()
            info = s.lock_info(self.res)
            if info is not None and info.get("owner") == self.owner:
                end = sent + int(info["pttl"]) / 1000.0
                self.ends[s.name] = max(self.ends.get(s.name, end), end)

    def sorted(self):
        return sorted(self.ends.values())


def waiters(server, key):
    info = server.lock_info(key)
    return 0 if info is None else int(info["waiters"])


def line_server(servers, key):
    """The server that holds `key` (a resource's line), if one does."""
    for s in servers:
        if s.call("EXISTS", key) == 1:
            return s
    return None


def row(scenario, v, **extra):
    r = {"scenario": scenario, "holds": v["holds"], "overlaps": len(v["overlaps"]),
         "over_limit": len(v["over_limit"]), "inversions": len(v["inversions"]),
         "stale_refused": v["stale_refused"] + v["late_refused"], "lost": v["lost"]}
    r.update(extra)
    return r


def standard(run, tag, clients, servers=5, module_args=(), prime=False, settings=None):
    """Fence, `servers` module servers and one worker per (index, name,
    library) in `clients`, all ready."""
    topo = Topology(run, tag)
    topo.start_fence()
    topo.start_servers(servers, module_args=module_args, prime=prime)
    workers = {}
    for i, name, library in clients:
        workers[name] = topo.client(i, name, settings=settings or SETTINGS, library=library)
    topo.wait_workers_ready()
    return topo, workers


# --- 1. a holder cut off from every server mid-hold -----------------------


def cut_off_holder(run):
    topo, w = standard(run, "cut", [(1, "a-cli", False), (2, "a-lib", True), (3, "b", True), (4, "a-elect", False)])
    try:
        return [cut_off_once(topo, "redlock run", w["a-cli"], w["b"]),
                cut_off_once(topo, "library", w["a-lib"], w["b"]),
                cut_off_once(topo, "redlock elect", w["a-elect"], w["b"])]
    finally:
        topo.close()


def cut_off_once(topo, variant, a, b):
    """`a` holds (through `redlock run`, the library, or as the leader of
    `redlock elect`, whose lock is redlock:election:NAME and whose next
    candidate `b` waits in that lock's line) and is cut off from every
    server mid-hold."""
    ttl = 3.0
    res = f"cut-{a.name}"
    # The lock on the servers (and the fenced key): an election's is its own.
    key = f"redlock:election:{res}" if variant == "redlock elect" else res
    cli = variant in ("redlock run", "redlock elect")
    go = os.path.join(topo.run.tmp, f"go-{res}")
    servers = topo.servers
    if cli:
        a.send("cli_hold", id="A", res=res, ttl=ttl, go=go, go_timeout=60, elect=variant == "redlock elect")
    else:
        a.send("hold", id="A", res=res, ttl=ttl)
    ga = granted(topo, a, "A", 20, f"the {variant} holder")
    # `redlock elect` tells its command no owner: the servers do.
    owner = ga["owner"] or (servers[0].lock_info(key) or {}).get("owner")
    topo.wait_event(is_("wrote", a.name, "A", accepted=True), 10, "the holder's first write")
    b.send("hold", id=f"B-{res}", res=key, ttl=ttl, wait=30)
    wait_until(lambda: any(waiters(s, key) >= 1 for s in servers), 10, "B waiting in line")
    # Mid-hold: after an extension.
    ext = Extensions(servers[0], key, owner)
    wait_until(lambda: ext.poll() >= 1, 10, "an extension of the holder's lock")
    ends = LeaseEnds(servers, key, owner)
    t_cut = topo.link_down(a.host)
    ends.poll()
    gb = topo.wait_event(is_("granted", b.name, f"B-{res}"), ttl + 20, "B granted", poll=ends.poll)
    lost = topo.wait_event(is_("lost", a.name, "A"), 10, "the cut-off holder's lost signal")
    lease = ends.sorted()
    if len(lease) < 3:
        raise ScenarioFailed(f"{variant}: the holder's lock was seen on {len(lease)} servers only")
    if not lost["t"] < lease[0]:
        raise ScenarioFailed(f"{variant}: lost signal {lost['t'] - t_cut:.3f} s after the cut, not before the "
                             f"lease's first end on a server ({lease[0] - t_cut:.3f} s)")
    # B is granted by a quorum, each server once the holder's lease ended there.
    if not gb["t"] >= lease[2] - 0.002:
        raise ScenarioFailed(f"{variant}: B granted {gb['t'] - t_cut:.3f} s after the cut, before the lease ended "
                             f"on a quorum ({lease[2] - t_cut:.3f} s)")
    if not gb["token"] > ga["token"]:
        raise ScenarioFailed(f"{variant}: B's token {gb['token']} not above the cut-off holder's {ga['token']}")
    topo.wait_event(is_("wrote", b.name, f"B-{res}", accepted=True), 10, "B's write")
    # The cut-off holder writes late, with its old token: the library's
    # does (the fence refuses it); the command of `redlock run` and `elect`,
    # a job that ignores SIGTERM and waits for the go file, cannot: it was
    # killed when its hold's validity ended, before B was granted.
    if cli:
        open(go, "w").close()
    else:
        a.send("write", id="A", late=True)
        late = topo.wait_event(is_("wrote", a.name, "A", late=True), 15, "the cut-off holder's late write")
        if late["accepted"]:
            raise ScenarioFailed(f"{variant}: the fence accepted the cut-off holder's late write")
    b.send("release", id=f"B-{res}")
    if cli:
        ex = topo.wait_event(is_("cli_exit", a.name, "A"), 20, f"{variant}'s exit")
        if ex["code"] != 76:
            raise ScenarioFailed(f"{variant} exited {ex['code']}, not 76 (lock lost): {ex['stderr']}")
        if topo.find(is_("wrote", a.name, "A", late=True)):
            raise ScenarioFailed(f"{variant}: the command wrote after B's grant: it outlived its hold")
    else:
        a.send("release", id="A")
    holds = [hold_of(topo, a, "A"), hold_of(topo, b, f"B-{res}")]
    topo.link_up(a.host)
    v = check(holds)
    assert_safe(f"cut off ({variant})", v, min_holds=2)
    st = fence_state(topo, key)
    refused = "0" if cli else "1"
    if st.get("token") != str(gb["token"]) or st.get("refused", "0") != refused:
        raise ScenarioFailed(f"{variant}: fence state {st}, expected B's token and {refused} refused write(s)")
    return row(f"1. holder cut off from all 5 mid-hold ({variant}, ttl 3 s)", v,
               lost_signal=lost["t"] - t_cut, next_grant=gb["t"] - t_cut, lease_end=lease[2] - t_cut,
               note=f"the lease ended on a quorum {lease[2] - t_cut:.3f} s after the cut, "
                    f"{lease[0] - t_cut:.3f} s on the first server")


# --- 2. a split 2 | 3 with a client on each side --------------------------


def split(run):
    topo, w = standard(run, "split", [(1, "a-lib", True), (1, "a-cli", False), (2, "b-lib", True), (2, "b-cli", False)])
    try:
        return [split_run(topo, w)]
    finally:
        topo.close()


def split_run(topo, w):
    res, ttl = "split", 2.0
    stop = os.path.join(topo.run.tmp, "stop-split")
    side_a, side_b = ("a-lib", "a-cli"), ("b-lib", "b-cli")
    for name in side_a + side_b:
        op = "cli_loop" if name.endswith("cli") else "loop"
        w[name].send(op, id="loop", res=res, ttl=ttl, wait=4.0, hold_ms=(100, 300), stop=stop)

    def grants(names, after=None, by="t"):
        return [e for e in topo.find(lambda e: e["ev"] == "granted" and e["w"] in names)
                if after is None or e[by] > after]

    wait_until(lambda: len(grants(side_a)) >= 2 and len(grants(side_b)) >= 2, 40, "both sides holding before the split")
    # A long hold on the minority side, split while it holds.
    w["a-lib"].send("hold", id="A-long", res=res, ttl=ttl, wait=20)
    ga = granted(topo, w["a-lib"], "A-long", 30, "the minority side's long hold")
    s = topo.servers
    t_split = topo.split([s[0].host, s[1].host, w["a-lib"].host], [s[2].host, s[3].host, s[4].host, w["b-lib"].host])
    lost = topo.wait_event(is_("lost", "a-lib", "A-long"), 10, "the minority holder's lost signal")
    first_b = wait_until(lambda: grants(side_b, t_split), ttl + 20, "a grant on the majority side")[0]
    if not first_b["token"] > ga["token"]:
        raise ScenarioFailed(f"split: the majority's token {first_b['token']} is not above the minority "
                             f"holder's {ga['token']}")
    topo.wait_event(lambda e: e["ev"] == "wrote" and e["w"] in side_b and e["t"] > first_b["t"], 10,
                    "the majority holder's write")
    w["a-lib"].send("write", id="A-long", late=True)
    late = topo.wait_event(is_("wrote", "a-lib", "A-long", late=True), 10, "the minority holder's late write")
    if late["accepted"]:
        raise ScenarioFailed("split: the fence accepted the minority holder's late write")
    w["a-lib"].send("release", id="A-long")

    def attempts(names, after):
        return [e for e in topo.find(lambda e: e["ev"] in ("failed", "cli_exit") and e["w"] in names)
                if e["sent"] > after]

    wait_until(lambda: len(grants(side_b, t_split)) >= 3 and len(attempts(side_a, t_split)) >= 2, 40,
               "the majority side granted and the minority side refused during the split")
    t_heal = topo.heal_split()
    wait_until(lambda: len(grants(side_a, t_heal, "sent")) >= 2 and len(grants(side_b, t_heal, "sent")) >= 2, 40,
               "both sides granted again after healing")
    open(stop, "w").close()
    for name in side_a + side_b:
        topo.wait_event(is_("loop_done", name), 30, f"{name}'s loop to end")
    holds = topo.holds(res)
    v = check(holds)
    assert_safe("split", v, min_holds=10)
    # Asked after the split began, granted before it healed: only the
    # majority side can be.
    minority = [h for h in holds if h["w"] in side_a and t_split < h["sent"] and h["granted"] < t_heal]
    if minority:
        raise ScenarioFailed(f"split: the minority side was granted during the split [{t_split:.3f}, {t_heal:.3f}]: "
                             f"{describe_hold(minority[0])}, requested at {minority[0]['sent']:.3f}")
    during = [h for h in holds if h["w"] in side_b and t_split < h["granted"] < t_heal]
    return row("2. split into 2 and 3 servers, a client on each side, ttl 2 s", v, lost_signal=lost["t"] - t_split,
               next_grant=first_b["t"] - t_split,
               note=f"during the split: majority {len(during)} holds, minority 0 of "
                    f"{len(attempts(side_a, t_split)) - len(attempts(side_a, t_heal))} attempts")


# --- 3. one-way loss ------------------------------------------------------


def one_way(run):
    rows = []
    # A reply slower than the request timeout from one of the three
    # healthy servers would cost the holder its lock (rightly): on a busy
    # machine, 300 ms keeps that from passing for the loss's doing.
    topo, w = standard(run, "oneway", [(1, "h", True), (2, "w1", True)],
                       settings=dict(SETTINGS, request_timeout=0.3))
    try:
        rows.append(one_way_loss(topo, w))
    finally:
        topo.close()
    # A topology of its own: after the loss above heals, the clients'
    # connections to the lossy servers wait out TCP's retransmission
    # backoff (see `recovery`), which is not what this part measures.
    topo, w = standard(run, "line", [(1, "w1", True), (2, "w2", False), (3, "w3", True)])
    try:
        rows.append(line_cut(topo, w))
    finally:
        topo.close()
    return rows


def one_way_loss(topo, w):
    """Replies from 2 of 5 servers dropped (the requests arrive and are
    executed) while H holds and W1 waits in line: H keeps its lock
    through its extensions, W1 is granted at H's release."""
    res, ttl = "oneway", 2.0
    servers = topo.servers
    w["h"].send("hold", id="H", res=res, ttl=ttl)
    gh = granted(topo, w["h"], "H", 20, "H")
    w["w1"].send("hold", id="W1", res=res, ttl=ttl, wait=40)
    line = wait_until(lambda: line_server(servers, f"redlock:line:{res}"), 10, "W1 in the resource's line")
    lossy = [s for s in servers if s is not line][:2]
    healthy = [s for s in servers if s is not line and s not in lossy][0]
    t_loss = now()
    for s in lossy:
        s.host.drop_replies()
    topo.note("replies dropped on " + ",".join(s.name for s in lossy))
    # The requests reach the lossy servers (their PTTL goes up at each
    # extension); the replies do not come back.
    seen = [Extensions(s, res, gh["owner"]) for s in [healthy] + lossy]
    wait_until(lambda: [e.poll() for e in seen][0] >= 3 and all(e.count >= 1 for e in seen[1:]), 15,
               "three extensions of H with replies lost on two servers")
    if topo.find(is_("lost", "h", "H")):
        raise ScenarioFailed("one-way loss on 2 of 5 servers: H lost its lock")
    held_through = now() - t_loss
    w["h"].send("release", id="H")
    rel = topo.wait_event(is_("releasing", "h", "H"), 10, "H's release")
    g1 = granted(topo, w["w1"], "W1", 15, "W1 (waiting in line through the loss)")
    if g1["t"] < rel["t"]:
        raise ScenarioFailed("W1 granted before H released")
    w["w1"].send("release", id="W1")
    holds = [hold_of(topo, w["h"], "H"), hold_of(topo, w["w1"], "W1")]
    v = check(holds)
    assert_safe("one-way loss", v, min_holds=2)
    return row("3a. replies from 2 of 5 dropped while one holds and one waits in line, ttl 2 s", v,
               lost_signal=None, next_grant=g1["t"] - rel["t"],
               note=f"the holder kept its lock {held_through:.1f} s through the loss (3 extensions, executed "
                    f"on the lossy servers too); next grant measured from its release")


def line_cut(topo, w):
    """The line instance cut off (link down) while W1 holds, one waits at
    the head of the line (on the lock itself, on every server) and one in
    the line instance's queue: the head is granted by the other four at
    W1's release, the other gives its place up and polls."""
    res, ttl = "line", 2.0
    servers = topo.servers
    w["w1"].send("hold", id="W1", res=res, ttl=ttl, wait=20)
    granted(topo, w["w1"], "W1", 20, "W1")
    w["w2"].send("cli_hold", id="W2", res=res, ttl=ttl, wait=40, hold_ms=300)
    w["w3"].send("hold", id="W3", res=res, ttl=ttl, wait=40)
    line = wait_until(lambda: line_server(servers, f"redlock:line:{res}"), 10, "the resource's line")
    # Settled: the head waits on the lock itself, the other in the line
    # instance's queue.
    wait_until(lambda: waiters(line, f"redlock:line:{res}") >= 1
               and any(waiters(s, res) >= 1 for s in servers if s is not line), 15,
               "W2 and W3 in line, the head waiting on the lock")
    t_cut = topo.link_down(line.host)
    w["w1"].send("release", id="W1")
    # Either may come first: W2's command ends by itself, W3 is released
    # once granted.
    g3 = granted(topo, w["w3"], "W3", 30, "W3 with the line instance cut off")
    w["w3"].send("release", id="W3")
    g2 = granted(topo, w["w2"], "W2", 30, "W2 with the line instance cut off")
    topo.wait_event(is_("cli_exit", "w2", "W2"), 20, "W2's redlock run to end")
    holds = [hold_of(topo, w[n], n.upper()) for n in ("w1", "w2", "w3")]
    topo.link_up(line.host)
    v = check(holds)
    assert_safe("line instance cut off", v, min_holds=3)
    first, second = sorted([g2, g3], key=lambda e: e["t"])
    return row("3b. the line instance cut off (link down) with one at the head of the line and one queued on it", v,
               lost_signal=None, next_grant=first["t"] - t_cut,
               note=f"the head granted by the other four at the release; the one queued on the cut-off line "
                    f"instance gave its place up and was granted {second['t'] - t_cut:.2f} s after the cut")


# --- recovery after healing ------------------------------------------------


# After a heal, a handle made before the cut is granted again within this.
RECOVERY_BOUND = 2.5


def recovery(run, outage=20.0):
    """Measured: a client cut off from every server for `outage` seconds
    (link down) keeps trying; after the link comes back, how long until it
    is granted again, through a `redislock` handle made before the cut
    (its connections) and through new `redlock run` processes."""
    topo, w = standard(run, "heal", [(1, "lib", True), (1, "cli", False)])
    try:
        res = "heal"
        stop = os.path.join(topo.run.tmp, "stop-heal")
        for name, op in (("lib", "loop"), ("cli", "cli_loop")):
            w[name].send(op, id="loop", res=res, ttl=1.0, wait=1.0, hold_ms=(20, 50), stop=stop)
        wait_until(lambda: all(len([h for h in topo.holds(res) if h["w"] == n]) >= 2 for n in w), 30,
                   "grants before the cut")
        host = w["lib"].host
        t_cut = topo.link_down(host)
        wait_until(lambda: now() >= t_cut + outage, outage + 5, "the outage", every=0.1)
        t_heal = topo.link_up(host)
        g = topo.wait_event(lambda e: e["ev"] == "granted" and e["w"] == "lib" and e["t"] > t_heal, 150,
                            "the handle granted again after the link came back")
        lib = g["t"] - t_heal
        # A redlock run started after the heal: new connections.
        g = topo.wait_event(lambda e: e["ev"] == "granted" and e["w"] == "cli" and e["sent"] > t_heal, 60,
                            "a redlock run started after the heal granted")
        cli = g["t"] - g["sent"]
        open(stop, "w").close()
        for n in w:
            topo.wait_event(is_("loop_done", n), 30, f"{n}'s loop to end")
        holds = topo.holds(res)
        v = check(holds)
        assert_safe("recovery", v, min_holds=4)
        # A handle's connections into the dark network are given up by the
        # kernel (TCP_USER_TIMEOUT): after the heal it connects afresh,
        # within its retry pauses, not after TCP's retransmission backoff
        # (6.75-6.89 s before). 2.5 s: about one second, with room for a
        # loaded machine.
        if lib > RECOVERY_BOUND:
            raise ScenarioFailed(f"recovery: the handle made before the cut was granted {lib:.2f} s after the heal "
                                 f"(bound {RECOVERY_BOUND:.1f} s)")
        during = [h for h in holds if t_cut < h["granted"] < t_heal]
        if during:
            raise ScenarioFailed(f"recovery: granted while cut off from every server: {describe_hold(during[0])}")
        return [row(f"R. measured: a client cut off from all 5 for {outage:.0f} s, then healed", v,
                    lost_signal=None, next_grant=lib,
                    note=f"next grant after the link came back: {lib:.2f} s through the handle made before the "
                         f"cut (its connections given up during the cut, made afresh); a redlock run started "
                         f"after the heal (new connections, its command started) {cli:.2f} s after its start")]
    finally:
        topo.close()


# --- 4. a flapping link under contention, every lock kind -----------------


def flapping(run, seconds=30.0):
    clients = [(i, f"c{i}", True) for i in range(1, 5)] + [(5, "c5", False), (6, "c6", False)]
    topo, w = standard(run, "flap", clients)
    try:
        return flapping_run(topo, w, seconds)
    finally:
        topo.close()


def flapping_run(topo, w, seconds):
    ttl, limit = 1.0, 2
    stop = os.path.join(topo.run.tmp, "stop-flap")
    kinds = {"flap-x": {"kind": "exclusive"}, "flap-rw": {"kind": "rw", "shared_ratio": 0.6},
             "flap-p": {"kind": "permit", "limit": limit}}
    for name, wk in w.items():
        op = "loop" if wk.host.short in ("c1", "c2", "c3", "c4") else "cli_loop"
        for res, k in kinds.items():
            # Holds up to half the ttl: some see an extension (every ttl/3).
            wk.send(op, id=f"loop-{res}", res=res, ttl=ttl, wait=3.0, hold_ms=(50, 500), stop=stop, **k)
    wait_until(lambda: len(topo.holds()) >= 6, 30, "holds before the flapping starts")
    # A client's link and a server's link, each toggled every 100-500 ms.
    flappers = [Flapper(topo, w["c1"].host), Flapper(topo, w["c5"].host), Flapper(topo, topo.servers[0].host)]
    t0 = topo.note("flapping c1, c5 and s1")
    for f in flappers:
        f.start()
    try:
        end = t0 + seconds
        wait_until(lambda: now() >= end, seconds + 5, "the flapping period", every=0.2)
        topo.check_errors()
    finally:
        for f in flappers:
            f.stop()
    t1 = topo.note("links up")
    open(stop, "w").close()
    for name in w:
        for res in kinds:
            topo.wait_event(is_("loop_done", name, f"loop-{res}"), 40, f"{name}'s {res} loop to end")
    rows = []
    for res, k in kinds.items():
        holds = topo.holds(res)
        during = [h for h in holds if t0 <= h["granted"] <= t1]
        v = check(holds, limit=k.get("limit"))
        assert_safe(f"flapping ({res})", v, min_holds=20)
        if len(during) < 10:
            raise ScenarioFailed(f"flapping ({res}): only {len(during)} holds during the flapping")
        kind = {"exclusive": "exclusive", "rw": "read-write (60 % shared)",
                "permit": f"permits (limit {limit})"}[k["kind"]]
        flapped = {n: [h for h in holds if h["w"] == n] for n in ("c1", "c5")}
        # Served in turn, though a fraction of what a good link gets (each
        # about 5-15 holds, against 12-20 for each other worker): not
        # starved (0-3 together when their neighbours were forgotten at
        # each flap, see Flapper).
        if len(flapped["c1"]) + len(flapped["c5"]) < 5:
            raise ScenarioFailed(f"flapping ({res}): the flapping clients starve: c1 {len(flapped['c1'])} holds, "
                                 f"c5 {len(flapped['c5'])}, the others {len(holds) - len(flapped['c1']) - len(flapped['c5'])}")
        untold = len(topo.find(lambda e: e["ev"] == "lost_untold" and e["res"] == res))
        rows.append(row(f"4. links of c1 (library), c5 (redlock run) and s1 flapping every 100-500 ms for "
                        f"{seconds:.0f} s, 6 workers, {kind}, ttl 1 s", v, lost_signal=None, next_grant=None,
                        note=f"{len(during)} holds while flapping; held (lost) by c1 {len(flapped['c1'])} "
                             f"({sum(h['lost'] for h in flapped['c1'])}), by c5 {len(flapped['c5'])} "
                             f"({sum(h['lost'] for h in flapped['c5'])}); redlock run lost untold {untold}; "
                             f"{sum(f.toggles for f in flappers)} toggles"))
    return rows


# --- 4b. clients that reach the quorum only through `redlock serve` ------


def serve(run, seconds=15.0):
    """Three workers reach the quorum only through a `redlock serve`
    endpoint each (in the worker's namespace, as a sidecar: see worker.py),
    two loops each on a connection of its own, and one worker through the
    library, all on one exclusive lock; c1's link (sv1 and its endpoint)
    and s1's flap, then sv2's endpoint is killed -9 while sv2 holds, and
    started again."""
    clients = [(1, "sv1", False), (2, "sv2", False), (3, "sv3", False), (4, "lib", True), (5, "lib-s", True)]
    topo, w = standard(run, "serve", clients)
    try:
        return serve_run(topo, w, seconds)
    finally:
        topo.close()


def serve_run(topo, w, seconds):
    # A wait of half the ttl: a serve client counts its validity from the
    # request (it hears nothing of the endpoint's rounds), so every grant
    # keeps most of it.
    ttl, wait, res, res_s = 3.0, 1.5, "serve-x", "serve-s"
    stop = os.path.join(topo.run.tmp, "stop-serve")
    sv = [w["sv1"], w["sv2"], w["sv3"]]
    for wk in sv:
        wk.send("endpoint")
    endpoint = {wk.name: topo.wait_event(is_("endpoint", wk.name), 20, f"{wk.name}'s endpoint listening") for wk in sv}
    for wk in sv:
        # sv2 holds longer: its endpoint is killed mid-hold.
        # sv1 and sv3 overstay now and then: each stops at its validity.
        hold_ms = (200, 400) if wk.name == "sv2" else (20, 150)
        overstay = 0.0 if wk.name == "sv2" else 0.08
        for k in (1, 2):
            wk.send("serve_loop", id=f"loop{k}", res=res, ttl=ttl, wait=wait, hold_ms=hold_ms, stop=stop,
                    late_ratio=0.3, overstay_ratio=overstay)
    w["lib"].send("loop", id="loop", res=res, ttl=ttl, wait=wait, hold_ms=(20, 150), stop=stop)
    # Beside it, a lock of SESSION holds through sv1's endpoint (flapped)
    # and sv3's, on a short lease (1 s) that the endpoint extends through
    # holds of 1 to 2.5 s, and the library's short holds.
    for wk in (w["sv1"], w["sv3"]):
        wk.send("serve_loop", id="session", res=res_s, ttl=1.0, wait=wait, hold_ms=(1000, 2500), stop=stop,
                late_ratio=0.3, session=True)
    w["lib-s"].send("loop", id="loop", res=res_s, ttl=1.0, wait=wait, hold_ms=(20, 150), stop=stop)
    wait_until(lambda: len(topo.holds(res)) >= 6, 30, "holds before the faults")
    flappers = [Flapper(topo, w["sv1"].host), Flapper(topo, topo.servers[0].host)]
    t0 = topo.note("flapping c1 (sv1 and its endpoint) and s1")
    for f in flappers:
        f.start()
    try:
        wait_until(lambda: now() >= t0 + seconds, seconds + 5, "the flapping period", every=0.2)
        topo.check_errors()
    finally:
        for f in flappers:
            f.stop()
    t1 = topo.note("links up")

    # sv2's endpoint killed -9 while sv2 holds through it: nobody releases
    # that hold, and nobody may be granted before its lease ends on a quorum.
    g = topo.wait_event(lambda e: e["ev"] == "granted" and e["w"] == "sv2" and e["t"] > t1, 30,
                        "a grant to sv2 after the flapping")
    os.kill(endpoint["sv2"]["pid"], signal.SIGKILL)
    t_kill = topo.note("sv2's endpoint killed -9")
    ends = {}
    for s in topo.servers:
        sent = now()
        info = s.lock_info(res)
        if info is not None and info.get("owner", "").startswith(g["owner"] + ":"):
            ends[s.name] = sent + int(info["pttl"]) / 1000.0
    topo.wait_event(is_("endpoint_exit", "sv2"), 10, "sv2's endpoint to exit")
    lease = sorted(ends.values())
    if len(lease) < 3:
        raise ScenarioFailed(f"serve: the hold of sv2's killed endpoint was seen on {len(lease)} servers only")
    # A quorum is free once at most two servers still hold it (a server
    # that never granted it is free all along); the module's lease is in
    # whole milliseconds of its clock.
    free = lease[len(lease) - 3]
    nxt = topo.wait_event(lambda e: e["ev"] == "granted" and e["res"] == res and e["t"] > t_kill,
                          free - now() + 2 * ttl + 15,
                          "the next grant after the kill")
    if not nxt["t"] >= free - 0.002:
        raise ScenarioFailed(f"serve: {nxt['w']} granted {nxt['t'] - t_kill:.3f} s after the kill, before the killed "
                             f"endpoint's hold ended on a quorum ({free - t_kill:.3f} s; held on {len(lease)})")
    killed = hold_of(topo, w["sv2"], g["id"])
    released = topo.find(is_("released", "sv2", g["id"]))
    if killed["released"] < t_kill or not released or released[0]["ok"]:
        raise ScenarioFailed(f"serve: sv2's hold {g['id']} ended before its endpoint was killed: not killed mid-hold")

    w["sv2"].send("endpoint")
    topo.wait_event(lambda e: e["ev"] == "endpoint" and e["w"] == "sv2" and e["t"] > t_kill, 20,
                    "sv2's endpoint started again")
    t_back = topo.note("sv2's endpoint started again")
    topo.wait_event(lambda e: e["ev"] == "granted" and e["w"] == "sv2" and e["t"] > t_back, 20,
                    "a grant to sv2 through its endpoint started again")
    wait_until(lambda: now() >= t_back + 3, 10, "holds after the restart", every=0.2)
    open(stop, "w").close()
    for wk in sv:
        for loop in ("loop1", "loop2") + (("session",) if wk.name != "sv2" else ()):
            topo.wait_event(is_("loop_done", wk.name, loop), 30, f"{wk.name}'s {loop} to end")
    for name in ("lib", "lib-s"):
        topo.wait_event(is_("loop_done", name, "loop"), 30, f"{name}'s loop to end")

    holds = topo.holds(res)
    v = check(holds)
    assert_safe("serve", v, min_holds=30)
    sessions = topo.holds(res_s)
    vs = check(sessions)
    assert_safe("serve (SESSION)", vs, min_holds=5)
    by = {n: [h for h in holds if h["w"] == n] for n in ("sv1", "sv2", "sv3", "lib")}
    through = sum(len(by[n]) for n in ("sv1", "sv2", "sv3"))
    counts = ", ".join(f"{n} {len(by[n])}" for n in by)
    # Served in turn: each serve worker, the flapped one too, holds.
    if through < 20 or any(len(by[n]) < 3 for n in ("sv1", "sv2", "sv3")):
        raise ScenarioFailed(f"serve: the serve workers starve: {counts}")
    through_s = [h for h in sessions if h["w"] != "lib-s"]
    if len(through_s) < 3:
        raise ScenarioFailed(f"serve: only {len(through_s)} SESSION holds through the endpoints")
    # In turn: the endpoint's WAIT waits in the line as the library's does,
    # so the library's loop gets about a serve loop's share (1 to 1.5
    # times the mean in runs; 4.6 times with an endpoint that served WAIT
    # as one round, its clients asking again at once).
    mean = through / 6
    if len(by["lib"]) > 3 * mean:
        raise ScenarioFailed(f"serve: the library's loop held {len(by['lib'])} times, a serve loop {mean:.1f} on "
                             f"average: the endpoint's waiters are not served in turn ({counts})")
    after = [h for h in holds if h["w"] == "sv2" and h["granted"] > t_back]
    late = [x for h in holds for x in h["writes"] if x.get("late")]
    if v["late_refused"] < 1:
        raise ScenarioFailed(f"serve: none of {len(late)} late writes was refused: they tested no fence")
    during = [h for h in by["sv1"] if t0 <= h["granted"] <= t1]
    # Holds that ran to their validity's end (the overstaying jobs).
    stopped = sum(1 for h in holds if h["lost"] and h["w"] != "lib")
    rows = [row(f"4b. 3 workers only through their own `redlock serve` (2 loops each) and 1 library worker, one "
                f"exclusive lock, ttl {ttl:.0f} s: links of c1 (sv1) and s1 flapping {seconds:.0f} s, then sv2's "
                f"endpoint killed -9 mid-hold and started again", v, lost_signal=None, next_grant=nxt["t"] - t_kill,
                note=f"holds {counts} (the library's loop {len(by['lib']) / mean:.1f} times a serve loop's mean); "
                     f"sv1 {len(during)} while flapping; the killed hold (on {len(lease)} servers) ended on a quorum "
                     f"{free - t_kill:.3f} s after the kill; sv2 {len(after)} after the restart; {stopped} serve "
                     f"holds stopped at their validity's end; late writes {len(late)}, {v['late_refused']} refused, "
                     f"{sum(x['accepted'] for x in late)} accepted (none after a newer token's write)")]
    rows.append(row("4b. the same run, a second lock: SESSION holds (ttl 1 s, held 1-2.5 s, the endpoint extending "
                    "them) through the endpoints of sv1 (flapped) and sv3, and the library's short holds", vs,
                    lost_signal=None, next_grant=None,
                    note=f"SESSION holds {len(through_s)}, {sum(h['lost'] for h in through_s)} ended by their "
                         f"connection's close (an extension failed); the library {len(sessions) - len(through_s)}"))
    return rows


# --- 5. failover of one instance (each a master with a replica) -----------


def vip(k):
    return f"{LOCK_NET}{10 + k}"


def garp(host, addr):
    """A gratuitous ARP from `host`'s eth0 for `addr` (what a failover
    manager sends when a service address moves): neighbours update their
    cache at once instead of waiting for it to go stale."""
    mac = json.loads(host.ip("-j", "link", "show", "eth0").stdout)[0]["address"]
    hw = bytes.fromhex(mac.replace(":", ""))
    ip = socket.inet_aton(addr)
    frame = b"\xff" * 6 + hw + struct.pack("!H", 0x0806)
    frame += struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + hw + ip + b"\x00" * 6 + ip
    s = socket_in(host.ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
    try:
        s.bind(("eth0", 0x0806))
        for _ in range(3):
            s.send(frame)
    finally:
        s.close()


def failover(run):
    topo = Topology(run, "fo")
    try:
        return failover_run(topo)
    finally:
        topo.close()


def replicated_instances(topo, n=5, module_args=(), prime=False):
    """n instances, each a master (namespace m<k>, service address
    10.231.0.1<k>) and its replica (r<k>, 10.231.0.3<k>, also listening on
    the service address, which it takes over at a failover)."""
    masters, replicas = [], []
    for k in range(1, n + 1):
        mh = topo.host(f"m{k}", lock_ip=vip(k))
        rh = topo.host(f"r{k}", lock_ip=f"{LOCK_NET}{30 + k}")
        # Listens on the service address before it has it (as with keepalived).
        sh("ip", "netns", "exec", rh.ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_nonlocal_bind")
        masters.append(Server(topo, mh, f"m{k}", module_args=module_args))
        replicas.append(Server(topo, rh, f"r{k}", module_args=module_args, replicaof=vip(k), extra_binds=[vip(k)],
                               url_addr=vip(k)))
    for s in masters + replicas:
        s.start()
    topo.servers.extend(masters)
    topo.others.extend(replicas)
    for s in masters + replicas:
        s.wait_ready()

    def in_sync():
        for r in replicas:
            wait_until(lambda r=r: r.info("replication").get("master_link_status") == "up", 15, f"{r.name} in sync")

    in_sync()
    if prime:
        # Stopped cleanly and started again, masters then replicas: each
        # loads the data it saved and skips its restart quarantine.
        topo.prime(masters)
        in_sync()
        topo.prime(replicas)
        in_sync()
    return masters, replicas


def promote(topo, master, replica, addr, delay=0.0):
    """The failover: the master is cut off from everyone (its link down);
    `delay` later its replica becomes a master and takes over its service
    address. Returns when the master was cut off and when the replica was
    promoted."""
    t_cut = topo.link_down(master.host)
    wait_until(lambda: now() >= t_cut + delay, delay + 5, "the failover delay", every=0.05)
    replica.call("REPLICAOF", "NO", "ONE")
    t_promoted = topo.note(f"{replica.name} promoted")
    master.host.ip("addr", "del", f"{addr}/24", "dev", "eth0")
    replica.host.ip("addr", "add", f"{addr}/24", "dev", "eth0")
    garp(replica.host, addr)
    topo.note(f"{addr} moved to {replica.name}")
    return t_cut, t_promoted


def granted_total(server):
    info = server.info()
    return int(info["redislock_acquire_granted_new"]) + int(info["redislock_acquire_granted_handoff"])


# Every master and replica of scenario 5, as docs/guide.md advises:
# quarantine >= max-token-lead, both >= the longest ttl.
FAILOVER_MODULE_ARGS = ["quarantine", 3000, "max-token-lead", 3000]


def failover_run(topo):
    topo.start_fence()
    masters, replicas = replicated_instances(topo, module_args=FAILOVER_MODULE_ARGS, prime=True)
    ttl, delay = 2.0, 2.0
    res = "failover"
    stop = os.path.join(topo.run.tmp, "stop-fo")
    ws = [topo.client(i, f"c{i}", settings=SETTINGS, library=i <= 3) for i in range(1, 5)]
    topo.wait_workers_ready()
    for wk in ws:
        wk.send("loop" if wk.name != "c4" else "cli_loop", id="loop", res=res, ttl=ttl, wait=6.0, hold_ms=(100, 300),
                stop=stop)
    wait_until(lambda: len(topo.holds(res)) >= 3, 30, "holds before the fault")
    m1, r1 = masters[0], replicas[0]
    # 1. The master is cut off from its replica: its grants stay its own.
    t_repl = now()
    m1.host.drop_peers([r1.host.addr])
    topo.note("m1 cut off from r1")
    wait_until(lambda: len([h for h in topo.holds(res) if h["granted"] > t_repl]) >= 3, 30,
               "grants while m1 cannot replicate")
    m1_offset = int(m1.info("replication")["master_repl_offset"])
    r1_offset = int(r1.info("replication")["master_repl_offset"])
    if not m1_offset > r1_offset:
        raise ScenarioFailed(f"m1's grants reached r1 although cut off (offsets {m1_offset} <= {r1_offset})")
    # 2. While someone holds: m1 is cut off from the clients too, and r1
    # promoted once every lease m1 may have granted has run out (the
    # restart quarantine's rule, applied by the failover: delay >= ttl).
    topo.wait_event(lambda e: e["ev"] == "granted" and e["t"] > now() - 0.05, 20, "a holder at the failover")
    t_cut, t_promoted = promote(topo, m1, r1, vip(1), delay=delay)
    left = m1.lock_info(res)
    if left is not None and int(left["pttl"]) > 0:
        raise ScenarioFailed(f"m1 still held a lease ({left['pttl']} ms) when r1 was promoted")
    r1_floor = int(r1.info()["redislock_highest_token"])
    m1_last = int(m1.info()["redislock_highest_token"])
    if not r1_floor > m1_last:
        raise ScenarioFailed(f"promoted r1's counter {r1_floor} not above m1's last token {m1_last}")
    before = granted_total(r1)
    wait_until(lambda: len([h for h in topo.holds(res) if h["granted"] > t_promoted]) >= 5
               and granted_total(r1) > before, 40, "grants after the failover, the promoted replica among the granters")
    open(stop, "w").close()
    for wk in ws:
        topo.wait_event(is_("loop_done", wk.name), 30, f"{wk.name}'s loop to end")
    holds = topo.holds(res)
    v = check(holds)
    assert_safe("failover", v, min_holds=10)
    after = [h for h in holds if h["granted"] > t_promoted]
    if min(h["token"] for h in after) <= m1_last:
        raise ScenarioFailed("a token after the failover is not above the old master's last token")
    rows = [row(f"5a. m1 cut off from its replica, then from all; r1 promoted {delay:.0f} s later (>= ttl {ttl:.0f} s)",
                v, lost_signal=None, next_grant=None,
                note=f"{len(after)} holds after the failover; r1's counter re-floored "
                     f"{(r1_floor - m1_last) / 1e6:.1f} s of tokens above m1's last")]
    rows.append(bare_quorum_failover(topo, masters, replicas))
    return rows


def bare_quorum_failover(topo, masters, replicas):
    """A holder granted by exactly 3 of 5 (it cannot reach two), one of
    them a master whose grant never reached its replica; that replica
    promoted at once. The promoted replica raises its counter (re-floored
    tokens) and starts the restart quarantine (3 s >= the ttl), so it
    cannot grant what its master had granted until that lease is over:
    no overlap. (Before promotions quarantined, B was granted 40 ms after
    the promotion while A still held.)"""
    ttl, res = 3.0, "bare"
    m2, r2 = masters[1], replicas[1]
    a = topo.client(5, "a", settings=SETTINGS)
    b = topo.client(6, "b", settings=SETTINGS)
    topo.wait_workers_ready()
    a.host.drop_peers([vip(4), vip(5)])
    m2.host.drop_peers([r2.host.addr])
    a.send("hold", id="A", res=res, ttl=ttl)
    ga = granted(topo, a, "A", 20, "A (by 3 of 5)")
    topo.wait_event(is_("wrote", "a", "A", accepted=True), 10, "A's write")
    on_r2 = r2.lock_info(res)
    t_fo, _ = promote(topo, m2, r2, vip(2))
    b.send("hold", id="B", res=res, ttl=ttl, wait=20)
    gb = granted(topo, b, "B", ttl + 20, "B")
    lost = topo.wait_event(is_("lost", "a", "A"), ttl + 10, "A's lost signal")
    topo.wait_event(is_("wrote", "b", "B", accepted=True), 10, "B's write")
    a.send("write", id="A", late=True)
    late = topo.wait_event(is_("wrote", "a", "A", late=True), 10, "A's late write")
    b.send("release", id="B")
    a.send("release", id="A")
    holds = [hold_of(topo, a, "A"), hold_of(topo, b, "B")]
    a.host.heal_peers()
    v = check(holds)
    assert_safe("bare-quorum failover", v, min_holds=2)
    if late["accepted"]:
        raise ScenarioFailed("bare-quorum failover: the fence accepted A's late write")
    return row("5b. A granted by exactly 3 of 5, one of them m2 cut off from r2; r2 promoted at once (quarantine 3 s >= ttl)", v,
               lost_signal=lost["t"] - t_fo, next_grant=gb["t"] - t_fo,
               note=f"A's lock on r2 before the failover: {'yes' if on_r2 else 'no'}; "
                    f"tokens A {ga['token']} < B {gb['token']}")


# --- the checker must be able to fail: an unsafe setting ------------------


def restart_quarantine(run):
    """A holder on all five; three servers killed -9 and restarted empty
    (a lost disk) while the lease runs, then another client asks. With
    quarantine 0 the restarted majority grants at once: the checker must
    report the overlap. With quarantine >= ttl: none."""
    rows = []
    for quarantine in (0, 3000):
        topo, w = standard(run, f"rq{quarantine // 1000}", [(1, "a", True), (2, "b", True)],
                           module_args=["quarantine", quarantine, "max-token-lead", max(quarantine, 1000)],
                           prime=quarantine > 0)
        try:
            rows.append(restart_once(topo, w["a"], w["b"], quarantine))
        finally:
            topo.close()
    return rows


def restart_once(topo, a, b, quarantine):
    # Without a quarantine, A's ttl leaves the restarts 2 s (its first
    # extension, which fails) to let B in beside it.
    ttl, res = (6.0 if quarantine == 0 else 3.0), "restart"
    a.send("hold", id="A", res=res, ttl=ttl)
    ga = granted(topo, a, "A", 20, "A")
    t_kill = topo.note("s1-s3 killed -9")
    for s in topo.servers[:3]:
        s.kill9()
        s.wipe()
        s.start()
    for s in topo.servers[:3]:
        s.wait_ready()
    b.send("hold", id="B", res=res, ttl=ttl, wait=20)
    gb = granted(topo, b, "B", ttl + 20, "B")
    lost = topo.wait_event(is_("lost", "a", "A"), ttl + 10, "A's lost signal")
    b.send("release", id="B")
    a.send("release", id="A")
    holds = [hold_of(topo, a, "A"), hold_of(topo, b, "B")]
    v = check(holds)
    if v["inversions"]:
        raise ScenarioFailed(f"restart, quarantine {quarantine}: token inversion")
    if quarantine == 0:
        if not v["overlaps"]:
            raise ScenarioFailed("unsafe setting (quarantine 0, a majority restarted empty): the checker reported "
                                 "no overlap; it cannot see what it exists for")
        name = "U. unsafe on purpose: quarantine 0, 3 of 5 restarted empty under a holder, ttl 6 s"
    else:
        assert_safe("restart with quarantine", v, min_holds=2)
        name = "U'. the same with quarantine 3 s >= ttl 3 s"
    return row(name, v, lost_signal=lost["t"] - t_kill, next_grant=gb["t"] - t_kill,
               note=f"tokens A {ga['token']} < B {gb['token']}")


def checker(run):
    """The checker on made-up histories: what it must flag, and what it
    must let pass."""

    def h(key, kind, token, granted, released, lost=False, writes=()):
        return {"id": f"{key}/{token}", "w": "x", "key": key, "kind": kind, "token": token, "granted": granted,
                "released": released, "lost": lost, "lost_t": released if lost else None, "writes": list(writes)}

    cases = [
        ("exclusive, one after the other", [h("k", "exclusive", 1, 0, 1), h("k", "exclusive", 2, 1, 2)], None, {}),
        ("exclusive overlap", [h("k", "exclusive", 1, 0, 2), h("k", "exclusive", 2, 1, 3)], None, {"overlaps": 1}),
        ("other keys do not overlap", [h("k", "exclusive", 1, 0, 2), h("j", "exclusive", 2, 1, 3)], None, {}),
        ("readers together", [h("k", "shared", 5, 0, 2), h("k", "shared", 3, 1, 3)], None, {}),
        ("a writer among readers", [h("k", "shared", 1, 0, 2), h("k", "exclusive", 2, 1, 3)], None, {"overlaps": 1}),
        ("a reader under a writer", [h("k", "exclusive", 1, 0, 2), h("k", "shared", 2, 1, 3)], None, {"overlaps": 1}),
        ("token back after a writer", [h("k", "exclusive", 5, 0, 1), h("k", "shared", 4, 2, 3)], None,
         {"inversions": 1}),
        ("token back between writers", [h("k", "exclusive", 5, 0, 1), h("k", "exclusive", 4, 2, 3)], None,
         {"inversions": 1}),
        ("permits within the limit", [h("p:0", "permit", 1, 0, 3), h("p:1", "permit", 1, 1, 3),
                                      h("p:0", "permit", 2, 3, 4)], 2, {}),
        ("permits over the limit", [h("p:0", "permit", 1, 0, 3), h("p:1", "permit", 1, 1, 3),
                                    h("p:2", "permit", 1, 2, 3)], 2, {"over_limit": 1}),
        ("a valid holder's write refused", [h("k", "exclusive", 1, 0, 2, writes=[{"t": 1, "accepted": False}])],
         None, {"refused_valid": 1}),
        ("a stale write refused", [h("k", "exclusive", 1, 0, 2, lost=True, writes=[{"t": 3, "accepted": False}])],
         None, {"stale_refused": 1}),
        ("a late write accepted after a newer one",
         [h("k", "exclusive", 1, 0, 1, writes=[{"sent": 3, "t": 3.1, "accepted": True, "late": True}]),
          h("k", "exclusive", 2, 1, 2, writes=[{"sent": 1.5, "t": 1.6, "accepted": True}])], None,
         {"stale_accepted": 1}),
        ("a late write accepted before any newer one",
         [h("k", "exclusive", 1, 0, 1, writes=[{"sent": 1.2, "t": 1.3, "accepted": True, "late": True}]),
          h("k", "exclusive", 2, 1, 2, writes=[{"sent": 1.5, "t": 1.6, "accepted": True}])], None, {}),
        ("a late write accepted while a newer one was unanswered",
         [h("k", "exclusive", 1, 0, 1, writes=[{"sent": 1.55, "t": 1.7, "accepted": True, "late": True}]),
          h("k", "exclusive", 2, 1, 2, writes=[{"sent": 1.5, "t": 1.6, "accepted": True}])], None, {}),
        ("a late write refused", [h("k", "exclusive", 1, 0, 1, writes=[{"sent": 3, "t": 3.1, "accepted": False,
                                                                       "late": True}]),
                                  h("k", "exclusive", 2, 1, 2, writes=[{"sent": 1.5, "t": 1.6, "accepted": True}])],
         None, {"late_refused": 1}),
    ]
    for name, holds, limit, expect in cases:
        v = check(holds, limit)
        got = {k: (len(v[k]) if isinstance(v[k], list) else v[k])
               for k in ("overlaps", "over_limit", "inversions", "refused_valid", "stale_accepted", "stale_refused",
                         "late_refused")}
        want = dict.fromkeys(got, 0)
        want.update(expect)
        if got != want:
            raise ScenarioFailed(f"checker, {name}: found {got}, expected {want}")
    return []


SCENARIOS = [
    ("checker", checker),
    ("cut-off", cut_off_holder),
    ("split", split),
    ("one-way", one_way),
    ("flapping", flapping),
    ("serve", serve),
    ("recovery", recovery),
    ("failover", failover),
    ("restart-quarantine", restart_quarantine),
]
