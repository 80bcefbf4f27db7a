"""The fair admission gate (``reference/admission.py``): its order, its bounds, its release of slow requests.

``FairQueue`` is tested deterministically with a hand-driven clock. The gate itself runs in front of a small
ASGI app on a real uvicorn server on loopback (real HTTP, real timers): the app stands in for the catalog's
handlers, so a slow one (a database or STS wait) can be made as slow as a test needs. The last tests run the
real catalog: its wiring, whose share a token's requests count in, ``/healthz`` and the ``enabled`` switch.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from lakesession._wire.sockets import bind
from lakesession.reference.admission import AdmissionGate, FairQueue, check_limits, client_key
from lakesession.reference.serving import BackgroundServer
from lakesession.reference.settings import AdmissionLimits
from tests.factories import Policy, make_catalog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drain(q: FairQueue[str], charge: float = 0.0) -> list[str]:
    """Pop everything, charging each admitted key ``charge`` as the gate does (its estimate of a slot's hold)."""
    out = []
    while (nxt := q.pop()) is not None:
        q.charge(nxt[0], charge)
        out.append(nxt[1])
    return out


# --- the order ---------------------------------------------------------------------------------------------


def test_unserved_clients_are_admitted_in_arrival_order() -> None:
    q: FairQueue[str] = FairQueue(1.0, Clock())
    for key, item in (("a", "a1"), ("b", "b1"), ("a", "a2"), ("c", "c1")):
        q.push(key, item)
    assert q.total == 4 and q.waiting("a") == 2
    # equal (no) usage: the earliest head first; a key's own items stay in order
    assert drain(q) == ["a1", "b1", "a2", "c1"]
    assert q.total == 0 and q.pop() is None


def test_one_request_of_a_light_client_goes_ahead_of_sixteen_busy_clients_queues() -> None:
    clock = Clock()
    q: FairQueue[str] = FairQueue(1.0, clock)
    for i in range(16):  # each attacker has been served 40 ms in the last moments, and has 3 requests queued
        q.charge(f"pest{i}", 0.040)
        for n in range(3):
            q.push(f"pest{i}", f"pest{i}-{n}")
    q.charge("ana", 0.004)  # the victim: one loadTable a while ago
    clock.now += 0.05
    q.push("ana", "ana-1")  # arrives last
    assert q.pop() == ("ana", "ana-1")
    # and the attackers, all equally served, share round robin: each one's first before anyone's second
    order = drain(q, charge=0.002)
    assert [o.split("-")[1] for o in order] == ["0"] * 16 + ["1"] * 16 + ["2"] * 16


def test_a_charge_while_waiting_moves_a_client_back() -> None:
    q: FairQueue[str] = FairQueue(1.0, Clock())
    q.push("a", "a1")
    q.push("b", "b1")
    q.charge("a", 0.010)  # a's request running elsewhere finished: a is now the heavier user
    assert drain(q) == ["b1", "a1"]


def test_usage_halves_every_half_life_and_decay_never_reorders() -> None:
    clock = Clock()
    q: FairQueue[str] = FairQueue(2.0, clock)
    q.charge("a", 0.8)
    q.charge("b", 0.2)
    clock.now += 2.0
    assert q.usage("a") == pytest.approx(0.4) and q.usage("b") == pytest.approx(0.1)
    clock.now += 4.0
    q.charge("b", 0.1)  # b: 0.025 + 0.1 = 0.125 > a's 0.1
    assert q.usage("a") == pytest.approx(0.1) and q.usage("b") == pytest.approx(0.125)
    q.push("b", "b1")
    q.push("a", "a1")
    assert drain(q) == ["a1", "b1"]


def test_rebasing_keeps_the_order_and_forgets_idle_clients() -> None:
    clock = Clock()
    q: FairQueue[str] = FairQueue(1.0, clock)
    q.charge("idle", 0.001)
    q.charge("a", 0.5)
    q.charge("b", 0.3)
    q.push("a", "a1")
    q.push("b", "b1")
    clock.now += 3.0
    q.charge("a", 0.0)  # nothing: but the clock is read (no rebase yet: 3 s is ~2 e-folds)
    clock.now += 60.0  # ~42 e-folds since the base: the next read renormalises
    assert q.usage("a") == pytest.approx(0.5 * 2**-63, rel=1e-6)
    assert "idle" not in q._usage  # below a microsecond: forgotten (clients that come and go do not pile up)
    q.charge("b", 0.2)
    assert drain(q) == ["a1", "b1"]


def test_a_withdrawn_request_is_never_popped() -> None:
    q: FairQueue[str] = FairQueue(1.0, Clock())
    for key, item in (("a", "a1"), ("a", "a2"), ("b", "b1")):
        q.push(key, item)
    q.remove("a", "a1")
    q.remove("b", "b1")
    assert q.total == 1 and q.waiting("b") == 0
    assert drain(q) == ["a2"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("concurrency", 0, "admission.concurrency must be at least 1"),
        ("queue_per_key", 0, "admission.queue_per_key must be at least 1"),
        ("hold_ms", 0.0, "admission.hold_ms must be positive milliseconds"),
        ("half_life", -1.0, "admission.half_life must be positive seconds"),
    ],
)
def test_unusable_settings_are_refused_naming_the_setting(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_limits(AdmissionLimits(**{field: value}))


# --- the gate on a real server ------------------------------------------------------------------------------


class Handlers:
    """The app behind the gate: ``/slow`` waits until released (or ``seconds``), everything answers its path."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.release = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        self.order.append(path)
        if path.startswith("/slow"):
            deadline = time.monotonic() + 5
            while not self.release.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        body = path.encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})


def by_header(scope: dict[str, Any]) -> Hashable:
    return dict(scope["headers"]).get(b"x-who", b"?")


@contextmanager
def gated(**limits: Any) -> Iterator[tuple[str, AdmissionGate, Handlers]]:
    handlers = Handlers()
    gate = AdmissionGate(handlers, limits=AdmissionLimits(**limits), key_of=by_header)
    server = BackgroundServer(gate, bind("127.0.0.1", 0), "gate-test")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", gate, handlers
    finally:
        handlers.release.set()
        server.stop()


def fire(uri: str, path: str, who: str, out: dict[str, httpx.Response]) -> threading.Thread:
    def run() -> None:
        out[path] = httpx.get(uri + path, headers={"x-who": who}, timeout=30)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def wait_for(cond: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_light_client_is_admitted_before_a_busy_clients_queue() -> None:
    with gated(concurrency=1, hold_ms=10_000) as (uri, gate, handlers):
        out: dict[str, httpx.Response] = {}
        threads = [fire(uri, "/slow", "pest", out)]
        wait_for(lambda: handlers.order == ["/slow"])  # pest holds the only slot
        for n in range(3):
            threads.append(fire(uri, f"/pest{n}", "pest", out))
            wait_for(lambda n=n: gate.queue.total == n + 1)
        threads.append(fire(uri, "/ana", "ana", out))  # the victim arrives last
        wait_for(lambda: gate.queue.total == 4)
        handlers.release.set()
        for t in threads:
            t.join(30)
        assert handlers.order == ["/slow", "/ana", "/pest0", "/pest1", "/pest2"]
        assert all(r.status_code == 200 for r in out.values())


def test_a_slow_handler_lets_the_next_request_in_after_hold_ms() -> None:
    for hold_ms, bound in ((50.0, (0.0, 1.0)), (10_000.0, (1.0, 30.0))):  # released vs held (the control)
        with gated(concurrency=1, hold_ms=hold_ms) as (uri, gate, handlers):
            out: dict[str, httpx.Response] = {}
            slow = fire(uri, "/slow", "etl", out)
            wait_for(lambda handlers=handlers: handlers.order == ["/slow"])
            threading.Timer(1.5, handlers.release.set).start()  # the slow handler takes 1.5 s
            t0 = time.monotonic()
            fast = httpx.get(uri + "/fast", headers={"x-who": "ana"}, timeout=30)
            waited = time.monotonic() - t0
            assert fast.status_code == 200
            assert bound[0] <= waited < bound[1], (hold_ms, waited)
            slow.join(30)
            assert out["/slow"].status_code == 200  # the released request carried on to its answer
            assert gate.free == 1 and gate.queue.total == 0  # every slot back, counted once


def test_over_long_queue_of_one_client_is_a_429_with_retry_after_others_still_queue() -> None:
    with gated(concurrency=1, hold_ms=10_000, queue_per_key=2) as (uri, gate, handlers):
        out: dict[str, httpx.Response] = {}
        threads = [fire(uri, "/slow", "pest", out)]
        wait_for(lambda: handlers.order == ["/slow"])
        threads.append(fire(uri, "/p1", "pest", out))
        wait_for(lambda: gate.queue.total == 1)
        threads.append(fire(uri, "/p2", "pest", out))
        wait_for(lambda: gate.queue.total == 2)
        refused = httpx.get(uri + "/p3", headers={"x-who": "pest"}, timeout=30)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert error["code"] == 429 and error["type"] == "TooManyRequestsException"
        assert "admission.queue_per_key" in error["message"]
        threads.append(fire(uri, "/ana", "ana", out))  # another client's request still waits its turn
        wait_for(lambda: gate.queue.total == 3)
        handlers.release.set()
        for t in threads:
            t.join(30)
        assert {p: r.status_code for p, r in out.items()} == {"/slow": 200, "/p1": 200, "/p2": 200, "/ana": 200}
        assert handlers.order == ["/slow", "/ana", "/p1", "/p2"]  # /p3 never reached the app


def test_a_full_gate_is_a_503_with_retry_after() -> None:
    with gated(concurrency=1, hold_ms=10_000, queue_total=1) as (uri, gate, handlers):
        out: dict[str, httpx.Response] = {}
        threads = [fire(uri, "/slow", "a", out), None]
        wait_for(lambda: handlers.order == ["/slow"])
        threads[1] = fire(uri, "/b", "b", out)
        wait_for(lambda: gate.queue.total == 1)
        refused = httpx.get(uri + "/c", headers={"x-who": "c"}, timeout=30)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["type"] == "ServiceUnavailableException"
        handlers.release.set()
        for t in threads:
            assert t is not None
            t.join(30)
        assert out["/b"].status_code == 200


# --- the real catalog ----------------------------------------------------------------------------------------

POLICY = Policy().user("ana", "ana-pw", role="readers").user("pest", "pest-pw", role="readers")


def test_the_catalog_counts_a_verified_token_as_its_principal_and_anything_else_as_the_network() -> None:
    with make_catalog(POLICY) as cat:
        services = cat.services
        key_of = client_key(services.verifier, "sub")
        ana = cat.admin.token_for("ana")
        scope: dict[str, Any] = {"headers": [(b"authorization", f"Bearer {ana}".encode())], "client": ("10.1.2.3", 5)}
        assert key_of(scope) == ("network", "10.1.2.0/24")  # never verified yet: the network's share
        assert httpx.get(cat.uri + "/v1/config", headers={"Authorization": f"Bearer {ana}"}).status_code == 200
        assert key_of(scope) == ("principal", "ana")  # verified by that request: ana's share
        forged = {"headers": [(b"authorization", b"Bearer " + ana.encode()[:-4] + b"AAAA")], "client": ("10.1.2.9", 1)}
        assert key_of(forged) == ("network", "10.1.2.0/24")  # a forged token buys no share of its own
        v6 = {"headers": [], "client": ("2001:db8:1:2:3:4:5:6", 1)}
        assert key_of(v6) == ("network", "2001:db8:1:2::/64")


def test_the_catalog_answers_health_at_the_gate_and_can_turn_the_gate_off() -> None:
    with make_catalog(POLICY) as cat:
        assert httpx.get(cat.uri + "/healthz", timeout=30).json() == {"status": "ok"}
        assert _gates(cat.app) == 1
        assert cat.app.user_middleware[0].cls is AdmissionGate  # the outermost own layer
    with make_catalog(POLICY, admission=AdmissionLimits(enabled=False)) as cat:
        assert httpx.get(cat.uri + "/healthz", timeout=30).json() == {"status": "ok"}  # the route itself
        assert _gates(cat.app) == 0


def _gates(app: Any) -> int:
    return sum(1 for m in app.user_middleware if m.cls is AdmissionGate)


def test_a_request_waiting_for_the_audit_commit_holds_no_slot() -> None:
    """Group commit: requests waiting for their audit records share one transaction, so the gate steps them aside
    while they wait (with one slot held to the end, every commit would carry one request's records)."""
    policy = Policy().service("etl", "etl-pw", role="eng").grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    limits = AdmissionLimits(concurrency=1, hold_ms=10_000)
    with make_catalog(policy, admission=limits) as cat:
        etl = {"Authorization": f"Bearer {cat.admin.token_for('etl')}"}
        p = f"{cat.uri}/v1/lakesession"
        assert httpx.post(f"{p}/namespaces", json={"namespace": ["ns"]}, headers=etl).status_code == 200
        schema = {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "i", "type": "long", "required": False}],
        }
        assert httpx.post(f"{p}/namespaces/ns/tables", json={"name": "t", "schema": schema}, headers=etl).is_success
        inserts: list[int] = []

        def count(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
            if statement.startswith("INSERT INTO ls_audit"):  # how many requests' records this commit carries
                column = [c.strip() for c in statement.split("(", 1)[1].split(")", 1)[0].split(",")].index("request_id")
                inserts.append(len({row[column] for row in params} if executemany else {params[column]}))

        from sqlalchemy import event

        engine = cat.services.directory.engine
        event.listen(engine, "before_cursor_execute", count)
        statuses: list[int] = []
        try:

            def load() -> None:
                with httpx.Client(base_url=p, headers=etl, timeout=60) as c:
                    statuses.extend(c.get("/namespaces/ns/tables/t").status_code for _ in range(10))

            # a burst of 8 clients; on a machine busy enough that each commit finishes before the next request
            # arrives no commit can be shared, so up to three bursts (one shared commit is what is claimed)
            for _ in range(3):
                threads = [threading.Thread(target=load) for _ in range(8)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
                if max(inserts, default=0) > 1:
                    break
        finally:
            event.remove(engine, "before_cursor_execute", count)
        assert statuses and set(statuses) == {200} and len(statuses) % 80 == 0
        assert sum(inserts) >= len(statuses)  # every load audited
        assert max(inserts) > 1, inserts  # and some commits carried several requests' records (all 1 if held)
