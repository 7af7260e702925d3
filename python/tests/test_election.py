"""Leader election (issue 43): `Election` and `AsyncElection` with three
candidates on five real servers; observers, blocking and asyncio, that see
every change in order."""

import asyncio
import os
import queue
import signal
import threading
import time

import pytest

from redislock import (
    AsyncElection,
    AsyncRedlock,
    ConfigError,
    Election,
    Leader,
    LockLost,
    LockReleased,
    NotAcquired,
    Redlock,
)

# Far longer than a handover may take: a resignation that left the lock
# to run out would keep the next candidate waiting for all of it.
TTL = 30.0
# Every wait for an event gives up after this (a failure, not a hang).
PATIENCE = 30.0


def client(servers):
    return Redlock(servers.urls, release_on_disconnect=True)


def line_length(servers, name):
    """Candidates waiting in the election's line: the head holds the
    line's place, the others wait in its queue (LOCK.INFO of the line key)."""
    longest = 0
    for s in servers:
        info = s.lock_info(f"redlock:line:redlock:election:{name}")
        if info is not None:
            longest = max(longest, 1 + int(info["waiters"]))
    return longest


def wait_until(condition, what, within=PATIENCE):
    """Polls an observable condition (the servers' state), never a sleep
    in its place."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


class Seen:
    """The leaders an observer yielded, in order, and a wait for one."""

    def __init__(self):
        self.leaders = []
        self.changed = threading.Condition()

    def add(self, leader):
        with self.changed:
            self.leaders.append(leader)
            self.changed.notify_all()

    def wait_for(self, leader):
        with self.changed:
            assert self.changed.wait_for(lambda: leader in self.leaders, PATIENCE), f"never observed {leader}: {self.leaders}"


def test_three_candidates_hand_over_in_term_order_and_observers_see_each_change(servers, resource):
    rl = client(servers)
    candidates = [Election(rl, resource, f"candidate-{i}", ttl=TTL) for i in range(3)]
    assert candidates[0].leader() is None
    last = Leader("done", 0)  # its term is known once the last leader leads

    # A blocking iterator in a thread and an async one on an event loop of
    # their own; each stops at the last change ("done").
    blocking, asynchronous = Seen(), Seen()
    watcher = Election(Redlock(servers.urls, release_on_disconnect=True), resource, "observer", observe_interval=0.05)

    def observe_blocking():
        for leader in watcher.observe():
            blocking.add(leader)
            if leader.value == "done":
                return

    async def observe_async():
        arl = AsyncRedlock(servers.urls, release_on_disconnect=True)
        async for leader in AsyncElection(arl, resource, "observer", observe_interval=0.05).observe():
            asynchronous.add(leader)
            if leader.value == "done":
                return

    observers = [threading.Thread(target=observe_blocking, daemon=True), threading.Thread(target=asyncio.run, args=(observe_async(),), daemon=True)]
    for o in observers:
        o.start()

    def seen_by_both(leader):
        blocking.wait_for(leader)
        asynchronous.wait_for(leader)

    first = candidates[0].campaign(timeout=PATIENCE)
    assert (first.name, first.value, first.lost, first.resigned) == (resource, "candidate-0", False, False)
    assert candidates[1].leader() == Leader("candidate-0", first.term)
    seen_by_both(Leader("candidate-0", first.term))

    # The two others wait in line while the first leads.
    led = queue.Queue()
    for i in (1, 2):
        threading.Thread(target=lambda i=i: led.put((i, candidates[i].campaign(), time.monotonic())), daemon=True).start()
    wait_until(lambda: line_length(servers, resource) >= 2, "both candidates wait in line")
    assert led.empty(), "a candidate led beside the leader"

    first.proclaim("candidate-0 at :8080")
    assert first.value == "candidate-0 at :8080"
    assert candidates[2].leader() == Leader("candidate-0 at :8080", first.term)
    seen_by_both(Leader("candidate-0 at :8080", first.term))

    # Resigning hands over at once, not after the lease.
    resigned_at = time.monotonic()
    first.resign()
    assert first.resigned
    i, second, led_at = led.get(timeout=PATIENCE)
    assert led_at - resigned_at < TTL / 2, f"handed over {led_at - resigned_at:.1f} s after the resignation"
    assert second.term > first.term
    assert candidates[0].leader() == Leader(f"candidate-{i}", second.term)
    seen_by_both(Leader(f"candidate-{i}", second.term))
    assert led.empty()
    with pytest.raises(LockReleased):
        first.resign()
    with pytest.raises(LockReleased):
        first.proclaim("again")

    # A with block resigns at its end.
    with second as lead:
        assert lead is second
    assert second.resigned
    j, third, _ = led.get(timeout=PATIENCE)
    assert j != i and third.term > second.term
    assert candidates[0].leader() == Leader(f"candidate-{j}", third.term)
    seen_by_both(Leader(f"candidate-{j}", third.term))

    third.proclaim("done")
    last = Leader("done", third.term)
    seen_by_both(last)
    third.resign()
    assert candidates[0].leader() is None
    for o in observers:
        o.join(PATIENCE)
        assert not o.is_alive()

    # Each change exactly once, in order: every change was observed before
    # the next was made.
    expected = [
        Leader("candidate-0", first.term),
        Leader("candidate-0 at :8080", first.term),
        Leader(f"candidate-{i}", second.term),
        Leader(f"candidate-{j}", third.term),
        last,
    ]
    assert blocking.leaders == expected
    assert asynchronous.leaders == expected


def test_a_timed_out_campaign_leaves_the_line(servers, resource):
    rl = client(servers)
    leader = Election(rl, resource, "a", ttl=TTL).campaign()
    try:
        with pytest.raises(NotAcquired):
            Election(rl, resource, "b", ttl=TTL).campaign(timeout=0.5)
        wait_until(lambda: line_length(servers, resource) == 0, "the timed-out campaign left the line")
    finally:
        leader.resign()
    # Nobody took the lead after it: the timed-out candidate is gone.
    assert Election(rl, resource, "c").leader() is None


def test_ctrl_c_ends_a_campaign_and_gives_its_place_up(servers, resource):
    rl = client(servers)
    leader = Election(rl, resource, "a", ttl=TTL).campaign()
    # A real SIGINT, with the handler an interactive program has (see
    # test_api's Ctrl-C test for why it is installed here).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = threading.Event()

    def ctrl_c_once_in_line():
        deadline = time.monotonic() + PATIENCE
        while line_length(servers, resource) < 1:
            if done.is_set() or time.monotonic() > deadline:
                return
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=ctrl_c_once_in_line)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                Election(rl, resource, "b", ttl=TTL).campaign()
            finally:
                done.set()
        wait_until(lambda: line_length(servers, resource) == 0, "the interrupted campaign left the line")
    finally:
        sender.join()
        signal.signal(signal.SIGINT, previous)
        leader.resign()
    # Nobody leads after it. The interrupted campaign's waits on the
    # servers may still be granted at the resignation: each is released
    # by the client at once, never kept for its ttl.
    observer = Election(rl, resource, "c")
    wait_until(lambda: observer.leader() is None, "nobody leads", within=TTL / 2)


def test_a_lost_leadership_calls_on_lost_and_the_with_block_raises(servers, resource):
    rl = client(servers)
    lost = threading.Event()
    election = Election(rl, resource, "a", ttl=1.5)
    key = f"redlock:election:{resource}"
    with pytest.raises(LockLost):
        with election.campaign(on_lost=lost.set) as lead:
            assert not lead.lost
            # Ended on a majority, as an operator's DEL would: the next
            # extension (at most ttl/3 away) reaches two servers only.
            for s in servers[:3]:
                assert s.call("DEL", key) == 1
            assert lost.wait(PATIENCE), "on_lost was not called"
            assert lead.lost
    assert lead.resigned


def test_an_election_needs_holds_bound_to_the_connection(servers, resource):
    with pytest.raises(ConfigError, match="release_on_disconnect"):
        Election(Redlock(servers.urls), resource, "a")
    with pytest.raises(ValueError):
        Election(client(servers), resource, "a", ttl=-1.0)
    with pytest.raises(ValueError):
        Election(client(servers), resource, "a", observe_interval=-1.0)
    with pytest.raises(TypeError):
        Election(AsyncRedlock(servers.urls, release_on_disconnect=True), resource, "a")
    e = Election(client(servers), resource, "a", ttl=9.0)
    assert (e.name, e.value, e.ttl) == (resource, "a", 9.0)
    assert 3.0 < e.lock_delay < 9.0


def test_asyncio_campaigns_cancel_hand_over_and_resign_at_the_end_of_async_with(servers, resource):
    async def main():
        arl = AsyncRedlock(servers.urls, release_on_disconnect=True)
        candidates = [AsyncElection(arl, resource, f"candidate-{i}", ttl=TTL) for i in range(3)]
        first = await candidates[0].campaign()
        assert (await candidates[1].leader()) == Leader("candidate-0", first.term)

        async def until(condition, what):
            await asyncio.get_running_loop().run_in_executor(None, wait_until, condition, what)

        # A campaign cancelled while it waits gives its place up.
        cancelled = asyncio.ensure_future(candidates[1].campaign())
        await until(lambda: line_length(servers, resource) == 1, "the campaign waits in line")
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await until(lambda: line_length(servers, resource) == 0, "the cancelled campaign left the line")

        waiting = asyncio.ensure_future(candidates[2].campaign())
        await until(lambda: line_length(servers, resource) == 1, "the next campaign waits in line")
        async with first:
            await first.proclaim("first, proclaimed")
            assert (await candidates[1].leader()) == Leader("first, proclaimed", first.term)
        assert first.resigned
        second = await asyncio.wait_for(waiting, TTL / 2)
        assert second.term > first.term and second.value == "candidate-2"
        await second.resign()

        async with candidates[1].campaign() as third:
            assert third.term > second.term
            assert (await candidates[0].leader()) == Leader("candidate-1", third.term)
        assert third.resigned
        assert (await candidates[0].leader()) is None

    asyncio.run(main())


def subscribed_everywhere(servers, name, n=2):
    """Whether every server has `n` subscribers to the election's channel
    (the announcements an observer hears)."""
    channel = f"__redislock@0__:redlock:election:{name}"
    return all(int(s.call("PUBSUB", "NUMSUB", channel)[1]) == n for s in servers)


def test_observers_see_every_term_however_short(servers, resource):
    """Terms far shorter than the observers' interval (10 s): each leader
    resigns the moment it leads, to a candidate already in line. Both
    observers, blocking and asyncio, see every term, in order, once."""
    rl = client(servers)
    watcher = Election(Redlock(servers.urls, release_on_disconnect=True), resource, "observer", observe_interval=10)
    blocking, asynchronous = Seen(), Seen()
    rounds, candidates = 5, 3

    def observe_blocking():
        for leader in watcher.observe():
            blocking.add(leader)
            if len(blocking.leaders) == rounds * candidates:
                return

    async def observe_async():
        arl = AsyncRedlock(servers.urls, release_on_disconnect=True)
        async for leader in AsyncElection(arl, resource, "observer", observe_interval=10).observe():
            asynchronous.add(leader)
            if len(asynchronous.leaders) == rounds * candidates:
                return

    observers = [threading.Thread(target=observe_blocking, daemon=True), threading.Thread(target=asyncio.run, args=(observe_async(),), daemon=True)]
    for o in observers:
        o.start()
    wait_until(lambda: subscribed_everywhere(servers, resource), "both observers subscribed on every server")

    led, lock = [], threading.Lock()

    def take_turns(i):
        election = Election(rl, resource, f"c{i}", ttl=TTL)
        for _ in range(rounds):
            lead = election.campaign(timeout=PATIENCE)
            with lock:
                led.append(Leader(f"c{i}", lead.term))
            lead.resign()

    turns = [threading.Thread(target=take_turns, args=(i,)) for i in range(candidates)]
    for t in turns:
        t.start()
    for t in turns:
        t.join(PATIENCE)
        assert not t.is_alive()
    for o in observers:
        o.join(PATIENCE)
        assert not o.is_alive(), f"an observer missed terms: {blocking.leaders} / {asynchronous.leaders}"
    expected = sorted(led, key=lambda leader: leader.term)
    assert len({leader.term for leader in expected}) == rounds * candidates
    assert blocking.leaders == expected
    assert asynchronous.leaders == expected
