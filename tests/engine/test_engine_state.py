"""Bounded state of the trusted engine, in-process (``Users`` on a real reference catalog, no JVM).

Each user costs a gateway (a port, two threads) and an exchanged token: a user exists only once the
issuer exchanged their token, idle users are evicted after ``idle_timeout``, a refused re-exchange (a
revoked sign-in session) evicts at once, and ``max_users`` / ``max_sessions`` refuse the next one in one
line. ``test_hundreds_of_users_come_and_go`` prints the process's threads, sockets and RSS before, at the peak
and after eviction (``-s`` shows them): 200 users in CI, 500 with ``LAKESESSION_SOAK=1`` (``tests/_soak.py``). A
thread or socket kept per user shows at either size; an RSS leak needs 2.5 times the bytes per user at 200.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lakesession.engine._limits import ExchangeRefused, Exhausted
from lakesession.engine._users import Users
from tests._engine import ENGINE_SECRET, signed_in_token
from tests._soak import sized
from tests._sockets import usage
from tests.factories import Policy, make_catalog

pytestmark = pytest.mark.slow

N = sized(200, 500)  # users in the catalog, each of whom comes and goes in the crowd test


@pytest.fixture(scope="module")
def crowd() -> Iterator[Any]:
    """A catalog with ``N`` users (no secrets: their tokens are minted by the embedded issuer) and the engine."""
    policy = Policy().service("engine", ENGINE_SECRET, role="engines").grant("engines", "TOKEN_EXCHANGE", "catalog")
    for i in range(N):
        policy.user(f"u{i:03d}")
    with make_catalog(policy, trusted_engines=[{"principal": "engine"}]) as handle:
        yield handle


def users(handle: Any, **limits: Any) -> Users:
    return Users(handle.uri, f"{handle.issuer_uri}/token", "engine", ENGINE_SECRET, **limits)


def test_no_gateway_before_the_exchange_succeeds(crowd: Any) -> None:
    """A verified ``sub`` the issuer will not act for (here: an expired token) starts nothing."""
    table = users(crowd)
    before = usage()
    expired = crowd.admin.token_for("u000", ttl=-120)
    with pytest.raises(ExchangeRefused):
        table.get("u000", expired)
    assert table.all() == [] and usage()["sockets"] <= before["sockets"]
    table.close()


def test_max_users_refuses_the_next_one_in_one_line(crowd: Any) -> None:
    table = users(crowd, max_users=2)
    try:
        table.get("u001", crowd.admin.token_for("u001"))
        table.get("u002", crowd.admin.token_for("u002"))
        with pytest.raises(Exhausted) as err:
            table.get("u003", crowd.admin.token_for("u003"))
        message = str(err.value)
        assert "\n" not in message and "rule 'max-users'" in message and "max_users" in message, message
        assert len(table.all()) == 2
        table.get("u001", crowd.admin.token_for("u001"))  # a known user still comes in
        table.evict(table.find("u002"), "test")  # type: ignore[arg-type]
        assert table.get("u003", crowd.admin.token_for("u003")).principal == "u003"  # a slot freed
    finally:
        table.close()


def test_max_sessions_per_user(crowd: Any) -> None:
    table = users(crowd, max_sessions=2)
    try:
        user = table.get("u004", crowd.admin.token_for("u004"))
        table.open_session(user, "s1")
        table.open_session(user, "s2")
        table.open_session(user, "s1")  # the same session again is no new one
        with pytest.raises(Exhausted) as err:
            table.open_session(user, "s3")
        assert "rule 'max-sessions-per-user'" in str(err.value) and "\n" not in str(err.value)
        table.close_session(user, "s1")
        table.open_session(user, "s3")
    finally:
        table.close()


def test_a_revoked_sign_in_session_is_refused_and_evicted(crowd: Any) -> None:
    """The user's sign-in session (refresh family) is revoked: the next check refuses them and frees the gateway."""
    issuer = crowd.admin._issuer
    token = signed_in_token(crowd, "u005")
    sid = issuer.verify(token)["sid"]
    evicted: list[str] = []
    table = users(crowd, on_evict=lambda user, why: evicted.append(user.principal))
    try:
        user = table.get("u005", token)
        uri = user.gateway.uri
        user.checked -= 60  # its last exchange is old: check() asks the issuer again
        table.check(user)  # still good
        assert evicted == []
        issuer.refresh_store.revoke_family(sid, reason="test", principal="u005")
        table.check(user)  # checked a moment ago: not again (a query's dozens of calls cost no exchange)
        user.checked -= 2
        with pytest.raises(ExchangeRefused, match="refused to exchange your access token"):
            table.check(user, force=True)  # a new session: asked again
        assert evicted == ["u005"] and table.find("u005") is None
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{uri}/v1/config", timeout=2)  # its gateway is gone
        with pytest.raises(ExchangeRefused):
            table.get("u005", token)  # and it does not come back with that token
    finally:
        table.close()


def test_an_unreachable_issuer_at_a_recheck_keeps_the_user_and_their_token(crowd: Any) -> None:
    """Only a refusal evicts: an issuer that does not answer leaves the current exchanged token in use."""
    evicted: list[str] = []
    table = users(crowd, on_evict=lambda user, why: evicted.append(user.principal))
    try:
        user = table.get("u007", crowd.admin.token_for("u007"))
        exchanged = user.identity.token()
        user.identity._token_url = "http://127.0.0.1:9/token"  # nothing listens there
        user.checked -= 60
        table.check(user, force=True)
        assert evicted == [] and table.find("u007") is user and user.identity.token() == exchanged
    finally:
        table.close()


def test_a_user_with_a_call_in_flight_is_never_idle(crowd: Any) -> None:
    table = users(crowd, idle_timeout=0.2)
    try:
        user = table.get("u006", crowd.admin.token_for("u006"))
        table.hold(user)
        time.sleep(0.4)
        assert table.evict_idle() == []
        table._done()
        assert table.evict_idle() == []  # idle time counts from the end of the call
        assert not table.evict(user, "test", idle_for=0.2)  # the reaper re-checks under the lock: a call just ended
        time.sleep(0.3)
        assert table.evict_idle() == ["u006"]
    finally:
        table.close()


def test_hundreds_of_users_come_and_go(crowd: Any) -> None:
    """``N`` distinct users one after another, then idle past the timeout: threads, sockets, RSS back to the start."""
    timeout = 2.0
    table = users(crowd, idle_timeout=timeout)
    table.start_reaper()
    tokens = {f"u{i:03d}": crowd.admin.token_for(f"u{i:03d}", ttl=600) for i in range(N)}
    try:
        for name in list(tokens)[:20]:  # warm-up: imports, connection pools, the issuer's caches
            table.get(name, tokens[name])
        _wait_empty(table, timeout)
        gc.collect()
        start = usage()
        started = time.monotonic()
        peak = dict(start)
        for i, (name, token) in enumerate(tokens.items()):
            table.get(name, token)
            if i % 50 == 49:
                now = usage()
                peak = {k: max(peak[k], now[k]) for k in now}
        took = time.monotonic() - started
        _wait_empty(table, timeout)
        gc.collect()
        time.sleep(0.5)
        end = usage()
    finally:
        table.close()
    print(f"\n{N} users in {took:.1f} s; start {start}; peak {peak}; after idle {end}; evicted {table.evicted}")
    assert peak["threads"] > start["threads"]  # users did cost threads while they were there
    for key in ("threads", "sockets", "rss_mib"):
        assert end[key] <= start[key] * 1.10 + 2, (key, start, end)


def _wait_empty(table: Users, timeout: float) -> None:
    deadline = time.monotonic() + timeout * 4 + 10
    while table.all() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert table.all() == [], [u.principal for u in table.all()][:5]
