"""Many users through the real engine process: its threads, sockets and memory come back after they go; a user
whose sign-in session is revoked is refused and evicted at their next session.

A catalog of its own with ``N`` principals (tokens minted by its embedded issuer) and an engine with
``--idle-timeout 3``; each user opens a Connect session with one raw ``Config`` call (the front door
exchanges their token, starts their gateway, configures the session in the JVM). Once all are idle and
evicted, the engine process is back where it started (printed with ``-s``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests._engine import ENGINE_SECRET, ENGINE_TESTS, RawConnect, RunningEngine, signed_in_token, start_engine
from tests._sockets import usage
from tests.factories import Policy, make_catalog

pytestmark = ENGINE_TESTS

N = 100
WARM = 10


@pytest.fixture(scope="module")
def crowd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, RunningEngine]]:
    policy = Policy().service("engine", ENGINE_SECRET, role="engines").grant("engines", "TOKEN_EXCHANGE", "catalog")
    for i in range(N + WARM):
        policy.user(f"c{i:03d}")
    policy.user("rita")
    with make_catalog(policy, bucket="lake-crowd", trusted_engines=[{"principal": "engine"}]) as handle:
        args = ["--idle-timeout", "3", "--max-users", str(N + WARM)]
        with start_engine(handle, tmp_path_factory.mktemp("crowd-engine"), extra_args=args) as engine:
            yield handle, engine


def come_and_go(catalog: Any, engine: RunningEngine, names: list[str]) -> dict[str, float]:
    """Each of ``names`` opens a session; then wait until the log says the last one was evicted. The peak usage."""
    raw = RawConnect(engine)
    pb = raw.pb
    peak: dict[str, float] = {}
    try:
        for name in names:
            request = pb.ConfigRequest(session_id=str(uuid.uuid4()))
            request.operation.get.keys.append("spark.sql.shuffle.partitions")
            raw.call(request, catalog.admin.token_for(name, ttl=600))
            now = usage(engine.process.pid)
            peak = {k: max(peak.get(k, 0), v) for k, v in now.items()}
    finally:
        raw.close()
    deadline = time.monotonic() + 60
    while f"evicted user '{names[-1]}'" not in engine.log_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert f"evicted user '{names[-1]}'" in engine.log_text()
    time.sleep(2)  # the reaper's last round (and its memory trim) is done
    return peak


def test_100_users_through_the_engine_process_come_and_go(crowd: tuple[Any, RunningEngine]) -> None:
    catalog, engine = crowd
    pid = engine.process.pid
    come_and_go(catalog, engine, [f"c{i:03d}" for i in range(WARM)])  # warm-up: lazy imports, pools, caches
    start = usage(pid)
    started = time.monotonic()
    peak = come_and_go(catalog, engine, [f"c{i:03d}" for i in range(WARM, WARM + N)])
    took = time.monotonic() - started
    end = usage(pid)
    print(f"\nengine process, {N} users in {took:.1f} s: start {start}; peak {peak}; after idle {end}")
    assert peak["threads"] > start["threads"] + 10  # they did cost while they were there
    assert end["threads"] <= start["threads"] * 1.10 + 1, (start, end)
    assert end["sockets"] <= start["sockets"] * 1.10 + 1, (start, end)
    assert end["rss_mib"] <= start["rss_mib"] * 1.10, (start, end)


def test_a_revoked_user_is_refused_at_the_next_session_and_evicted(crowd: tuple[Any, RunningEngine]) -> None:
    """rita's sign-in session (refresh family) is revoked: her token still verifies (JWKS), but the issuer no longer
    exchanges it, so the engine refuses her next session in one line and frees what she held."""
    import grpc

    catalog, engine = crowd
    issuer = catalog.admin._issuer
    token = signed_in_token(catalog, "rita")
    raw = RawConnect(engine)
    pb = raw.pb

    def open_session() -> Any:
        request = pb.ConfigRequest(session_id=str(uuid.uuid4()))
        request.operation.get.keys.append("spark.sql.shuffle.partitions")
        return raw.call(request, token)

    try:
        open_session()  # rita works
        mark = len(engine.log_text())
        issuer.refresh_store.revoke_family(issuer.verify(token)["sid"], reason="test", principal="rita")
        time.sleep(1.1)  # past the exchange that created her (a new session asks the issuer again after 1 s)
        with pytest.raises(grpc.RpcError) as err:
            open_session()
    finally:
        raw.close()
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    details = err.value.details()
    assert "\n" not in details and "refused to let the engine act for you" in details and "log in again" in details
    assert "evicted user 'rita' (the issuer refused to act for them" in engine.log_text()[mark:]
