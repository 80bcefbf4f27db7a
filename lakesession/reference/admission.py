"""The fair admission gate: at most K requests run the catalog at once, the least served client's first.

Why: under a flood of cheap requests from many valid principals, every request in flight shares the event
loop, the threadpool and the GIL, so a user's one loadTable waited for the work of all the others (issue #40:
victim p99 100 ms under 16 attackers). Making requests cheaper only bought the attackers more of them. The
gate is the outermost pure-ASGI layer: it keeps the requests in flight to ``concurrency`` (2) and, when more
wait, lets in the one whose client has the least recent server time (slot time while others waited,
decayed with ``half_life``).
A principal with one request now and then is admitted ahead of the queue of principals who keep requests in
flight back to back; principals who all flood get equal shares.

* **Whose share.** A bearer token the catalog verified recently (``CachingVerifier.known``: a dict lookup,
  no verification) counts as its principal (the ``principal_claim``): minting more tokens gives no more
  shares. Anything else (no token, an unknown, forged or expired one, the token endpoint) counts as the
  client's network, /24 IPv4 or /64 IPv6 (``network_of``, as the device-flow quotas): a forged token cannot
  buy a fresh share, nor land in anyone's but the sender's network's.
* **Slots are never held hostage.** A slot is released when the response has been sent, when the request
  starts waiting for its audit records' group commit (``step_aside``), or ``hold_ms`` (50 ms) after
  admission, whichever comes first: a handler waiting on a database or STS lets the next request in and
  carries on. The client is charged the time it held the slot.
* **Bounded queues.** Over ``queue_per_key`` waiting requests of one share: 429, over ``queue_total`` in all:
  503; both with ``Retry-After`` and an Iceberg ``ErrorModel`` body (Iceberg Java's client retries both).
* **Health checks** (``GET /healthz``) are answered by the gate itself, never queued: a probe asks whether
  the server is alive, and a busy gate is alive (the route's answer is the same, without the stack's cost).
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from . import timing
from .claims import claim_at
from .errors import error_body
from .guard import ASGIApp, Message, Receive, Scope, Send
from .idp._devices import network_of
from .settings import AdmissionLimits

T = TypeVar("T")
KeyOf = Callable[[Scope], Hashable]

STEP_ASIDE = "ls_admission_step_aside"  # scope key: call it (from any thread) when the request starts waiting on I/O
_REBASE_AFTER = 30.0  # e-folds of decay before the scaled usages are renormalised (e^30 ~ 1e13: no overflow)
_FORGET_BELOW = 1e-6  # seconds of decayed usage under which an idle client is forgotten


class FairQueue(Generic[T]):
    """Waiting items per key, popped least-used key first (its oldest item); usage decays exponentially.

    Usage is stored scaled by ``e^(rate·(t - base))`` so that decay, the same for every key, never reorders
    them: a heap of the keys' heads stays valid as time passes, and only a key that is charged while it has
    items waiting is pushed again (its old entry is skipped when met). ``clock`` is injectable for tests.
    """

    def __init__(self, half_life: float, clock: Callable[[], float] = time.monotonic):
        if half_life <= 0:
            raise ValueError(f"admission.half_life must be positive seconds, not {half_life!r}")
        self._rate = math.log(2) / half_life
        self._clock = clock
        self._base = clock()
        self._usage: dict[Hashable, float] = {}  # scaled
        self._waiting: dict[Hashable, deque[tuple[int, T]]] = {}
        self._heap: list[tuple[float, int, int, Hashable]] = []  # (scaled usage, head's arrival, version, key)
        self._version: dict[Hashable, int] = {}
        self._seq = 0
        self.total = 0

    def _scale(self) -> float:
        exponent = self._rate * (self._clock() - self._base)
        if exponent > _REBASE_AFTER:
            self._rebase()
            exponent = 0.0
        return math.exp(exponent)

    def _rebase(self) -> None:
        now = self._clock()
        factor = math.exp(-self._rate * (now - self._base))
        self._base = now
        self._usage = {
            k: u * factor for k, u in self._usage.items() if u * factor >= _FORGET_BELOW or k in self._waiting
        }
        self._heap = []
        for key in self._waiting:
            self._push_head(key)

    def usage(self, key: Hashable) -> float:
        """``key``'s decayed server time now (seconds)."""
        scale = self._scale()  # first: it may renormalise the stored usages
        return self._usage.get(key, 0.0) / scale

    def charge(self, key: Hashable, seconds: float) -> None:
        """Add ``seconds`` of server time to ``key`` (negative: a correction of an earlier estimate)."""
        scale = self._scale()  # first: it may renormalise the stored usages
        self._usage[key] = max(0.0, self._usage.get(key, 0.0) + seconds * scale)
        if key in self._waiting:
            self._push_head(key)

    def _push_head(self, key: Hashable) -> None:
        version = self._version.get(key, 0) + 1
        self._version[key] = version
        heapq.heappush(self._heap, (self._usage.get(key, 0.0), self._waiting[key][0][0], version, key))

    def push(self, key: Hashable, item: T) -> None:
        self._seq += 1
        queue = self._waiting.get(key)
        if queue is None:
            self._waiting[key] = deque([(self._seq, item)])
            self._push_head(key)
        else:
            queue.append((self._seq, item))
        self.total += 1

    def waiting(self, key: Hashable) -> int:
        queue = self._waiting.get(key)
        return len(queue) if queue is not None else 0

    def pop(self) -> tuple[Hashable, T] | None:
        """The oldest item of the least used key with items waiting (ties: the earliest arrival), or None."""
        while self._heap:
            _, _, version, key = heapq.heappop(self._heap)
            if self._version.get(key) != version or key not in self._waiting:
                continue  # superseded by a later push of the same key
            queue = self._waiting[key]
            _, item = queue.popleft()
            self.total -= 1
            if queue:
                self._push_head(key)
            else:
                del self._waiting[key]
                del self._version[key]
            return key, item
        return None

    def remove(self, key: Hashable, item: T) -> None:
        """Withdraw a waiting ``item`` (its request was cancelled); its key's heap entry is fixed lazily."""
        queue = self._waiting.get(key)
        if queue is None:
            return
        for entry in queue:
            if entry[1] is item:
                queue.remove(entry)
                self.total -= 1
                break
        if not queue:
            del self._waiting[key]
            del self._version[key]
        else:
            self._push_head(key)


def client_key(verifier: Any, principal_claim: str) -> KeyOf:
    """A request's share: its verified token's principal, else its client's network (see the module docstring)."""

    def key_of(scope: Scope) -> Hashable:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                if value[:7].lower() == b"bearer ":
                    claims = verifier.known(value[7:].strip().decode("latin-1"))
                    subject = claim_at(claims, principal_claim) if claims is not None else None
                    if isinstance(subject, str):
                        return ("principal", subject)
                break
        client = scope.get("client")
        return ("network", network_of(str(client[0])) if client else "unknown")

    return key_of


def check_limits(limits: AdmissionLimits) -> None:
    """Refuse settings the gate cannot work with (at start, naming the setting)."""
    for name in ("concurrency", "queue_per_key", "queue_total"):
        if getattr(limits, name) < 1:
            raise ValueError(f"admission.{name} must be at least 1, not {getattr(limits, name)!r}")
    for name, unit in (("hold_ms", "milliseconds"), ("half_life", "seconds")):
        if not getattr(limits, name) > 0:
            raise ValueError(f"admission.{name} must be positive {unit}, not {getattr(limits, name)!r}")


def step_aside(scope: Scope) -> None:
    """The request is about to wait on I/O (its audit records' group commit): let the next one in now.

    Called from the threadpool; the release itself runs on the event loop. Waiters joining one commit is what
    makes group commit pay: holding slots through it would let only ``concurrency`` requests share a commit.
    """
    hook = scope.get(STEP_ASIDE)
    if hook is not None:
        hook()


class AdmissionGate:
    """Pure ASGI middleware: the fair admission gate (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, limits: AdmissionLimits, key_of: KeyOf):
        check_limits(limits)
        self.app = app
        self.limits = limits
        self.key_of = key_of
        self.hold = limits.hold_ms / 1000
        self.free = limits.concurrency
        self.queue: FairQueue[asyncio.Future[float]] = FairQueue(limits.half_life)
        self.estimate = 0.002  # a slot's usual hold (s), charged on admission and corrected on release
        self.admitted = 0  # requests let in so far (Server-Timing's ``ahead``)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("path") == "/healthz" and scope.get("method") == "GET":
            await _answer(send, 200, {"status": "ok"})
            return
        key = self.key_of(scope)
        t0 = time.perf_counter()
        contended = not (self.free > 0 and not self.queue.total)
        before, estimate = self.admitted, 0.0
        if not contended:
            self.free -= 1
            self.admitted += 1
        else:
            refused = self._refusal(key)
            if refused is not None:
                await _answer(send, refused[0], refused[1], retry_after=1)
                return
            ticket: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            self.queue.push(key, ticket)
            try:
                estimate = await ticket  # what its share was charged when it was let in
            except asyncio.CancelledError:
                if ticket.done() and not ticket.cancelled():
                    self._release_slot()  # admitted just as it was cancelled: pass the slot on
                else:
                    self.queue.remove(key, ticket)
                raise
        admitted = time.perf_counter()
        timing.add(scope, "gate", admitted - t0)
        timing.add(scope, "ahead", (self.admitted - before - 1) / 1000)  # a count: let in while this one waited
        await self._run(key, admitted, contended, estimate, scope, receive, send)

    def _refusal(self, key: Hashable) -> tuple[int, dict[str, Any]] | None:
        if self.queue.waiting(key) >= self.limits.queue_per_key:
            message = (
                f"Too many requests: {self.limits.queue_per_key} of this client's requests are already waiting "
                "(admission.queue_per_key); retry in 1 s"
            )
            return 429, error_body(429, "TooManyRequestsException", message)
        if self.queue.total >= self.limits.queue_total:
            message = "The catalog is overloaded: too many requests are waiting (admission.queue_total); retry in 1 s"
            return 503, error_body(503, "ServiceUnavailableException", message)
        return None

    async def _run(
        self,
        key: Hashable,
        admitted: float,
        contended: bool,
        estimate: float,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Run the request in its slot; charge its share the slot time (``estimate`` was charged when it was let
        in), but only time others waited for: what a client used of an idle server costs it nothing later."""
        held = False

        def release() -> None:
            nonlocal held
            if held:
                return
            held = True
            timer.cancel()
            spent = min(time.perf_counter() - admitted, self.hold)
            self.estimate += (spent - self.estimate) / 64
            if contended or self.queue.total:
                self.queue.charge(key, spent - estimate)
            self._release_slot()

        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.hold, release)
        scope[STEP_ASIDE] = lambda: loop.call_soon_threadsafe(release)

        async def sending(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                release()  # the answer is out: whatever the app does next (background work) holds no slot

        try:
            await self.app(scope, receive, sending)
        finally:
            release()

    def _release_slot(self) -> None:
        """Hand the slot to the next waiter (least used share first), or free it."""
        while (nxt := self.queue.pop()) is not None:
            key, ticket = nxt
            if not ticket.done():
                self.queue.charge(key, self.estimate)  # now: its share's next waiter is ranked with it counted
                ticket.set_result(self.estimate)
                self.admitted += 1
                return
        self.free += 1


async def _answer(send: Send, status: int, body: dict[str, Any], *, retry_after: int | None = None) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})
