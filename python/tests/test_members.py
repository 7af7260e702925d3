"""Group membership (issue 61): `Group` and `AsyncGroup` on five real
servers. Three members join with values, `members()` lists them in join
order with their values; one proclaims a new value, one leaves, and the
list agrees each time."""

import asyncio
import gc
import time

import pytest

from redislock import (
    AsyncGroup,
    AsyncMembership,
    AsyncRedlock,
    ConfigError,
    Group,
    LockLost,
    LockReleased,
    Member,
    Membership,
    Redlock,
)


def client(servers):
    return Redlock(servers.urls, release_on_disconnect=True)


def listed(members):
    return [(m.owner, m.token, m.value) for m in members]


def wait_until(condition, what, within=30.0):
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not so after {within} s: {what}"
        time.sleep(0.01)


def test_three_members_are_listed_until_one_leaves(servers, resource):
    group = Group(client(servers), resource)
    assert group.name == resource
    assert group.resource == f"redlock:group:{resource}"
    assert group.members() == []

    a, b, c = (group.join(value) for value in ("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"))
    assert all(isinstance(m, Membership) for m in (a, b, c))
    assert a.token < b.token < c.token, "join order"
    assert (a.group, a.value, a.left, a.lost) == (resource, "10.0.0.1:80", False, False)
    members = group.members()
    assert all(isinstance(m, Member) for m in members)
    assert listed(members) == [(m.owner, m.token, m.value) for m in (a, b, c)]

    b.proclaim("10.0.0.2:81")
    assert b.value == "10.0.0.2:81"
    assert [m.value for m in group.members()] == ["10.0.0.1:80", "10.0.0.2:81", "10.0.0.3:80"]

    b.leave()
    assert b.left
    assert listed(group.members()) == [(m.owner, m.token, m.value) for m in (a, c)]
    with pytest.raises(LockReleased):
        b.leave()
    with pytest.raises(LockReleased):
        b.proclaim("again")

    # A with block leaves at its end.
    with c:
        pass
    assert c.left
    assert listed(group.members()) == [(a.owner, a.token, "10.0.0.1:80")]
    a.leave()
    assert group.members() == []


def test_a_membership_dropped_unleft_leaves_in_the_background(servers, resource):
    group = Group(client(servers), resource)
    kept = group.join("kept")
    dropped = group.join("dropped")
    assert len(group.members()) == 2
    del dropped
    gc.collect()
    deadline = time.monotonic() + 10.0
    while listed(group.members()) != [(kept.owner, kept.token, "kept")]:
        assert time.monotonic() < deadline, "the dropped membership is still listed"
        time.sleep(0.01)
    kept.leave()


def test_a_group_needs_connection_bound_holds_and_a_value(servers, resource):
    with pytest.raises(ConfigError, match="release_on_disconnect"):
        Group(Redlock(servers.urls), resource)
    group = Group(client(servers), resource)
    with pytest.raises(ConfigError):
        group.join("")
    assert group.members() == []


def test_async_members_are_listed_until_they_leave(servers, resource):
    async def main():
        group = AsyncGroup(AsyncRedlock(servers.urls, release_on_disconnect=True), resource)
        a = await group.join("a")
        b = await group.join("b")
        assert isinstance(a, AsyncMembership)
        assert listed(await group.members()) == [(a.owner, a.token, "a"), (b.owner, b.token, "b")]
        await a.proclaim("a2")
        async with b:
            assert [m.value for m in await group.members()] == ["a2", "b"]
        assert b.left
        assert listed(await group.members()) == [(a.owner, a.token, "a2")]
        await a.leave()
        assert await group.members() == []

    asyncio.run(main())


def test_leaving_a_lost_membership_raises_lock_lost_as_resigning_a_lost_leadership_does(servers, resource):
    group = Group(client(servers), resource, ttl=1.5)
    me = group.join("a")
    # Ended on a majority, as an operator's DEL would: the next extension
    # (at most ttl/3 away) reaches two servers only.
    for s in servers[:3]:
        assert s.call("DEL", group.resource) == 1
    wait_until(lambda: me.lost, "the membership is lost")
    assert not me.left
    # It leaves all the same (the two servers that still hold it let go),
    # and says it had been lost, as Leadership.resign does.
    with pytest.raises(LockLost):
        me.leave()
    assert me.left
    assert all(s.call("EXISTS", group.resource) == 0 for s in servers)
    with pytest.raises(LockReleased):
        me.leave()
    # A with block says so too, at its end.
    with pytest.raises(LockLost):
        with group.join("b") as other:
            for s in servers[:3]:
                assert s.call("DEL", group.resource) == 1
            wait_until(lambda: other.lost, "the second membership is lost")
    assert other.left
