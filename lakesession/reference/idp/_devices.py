"""Pending device codes (RFC 8628), in memory, bounded so that no flood can end or block a user's sign-in.

The store is bounded per address, per network and overall. A network is the /24 of an IPv4
address or the /64 of an IPv6 one (what one site, one NAT or one customer typically holds;
``network_of``). Per-address and per-network quotas answer 429 to the caller over them.

When the store is full (``total``), a new code may take the place of another only where that
cannot hurt a user signing in:

* A code is *settled* once a user signed in on the verification page and approved (or denied)
  it: that is the step where the code is shown to an authenticated user. A settled code is
  never evicted by anyone else's authorizations; it leaves when its device redeems it or when it
  expires. Each principal holds at most ``per_principal`` settled codes (issue 40, V15: one account
  approving its own codes filled the store for ten minutes): settling one more withdraws that
  principal's oldest settled code (it expires at once, so its device is told ``expired_token``).
* Among unsettled codes, the victim is the oldest code of the network holding the most
  (counting the newcomer's own network, so a network at the top evicts its own oldest code;
  among equally large networks, the one that reached that size last). A flood from one
  network, or from a few, evicts its own codes.
* If that network would hold a single code, every network holds at most one: the flood comes
  from as many networks as the store has codes, and evicting by age would evict the user who
  started first. The new authorization is refused instead (503 ``temporarily_unavailable``
  with ``Retry-After`` until the first code expires). Users already signing in finish; new
  ones wait for the flood's codes to expire. A store full of settled codes refuses the same way.

How long that wait can be is bounded (issue 40, V16: a flood from 10,000 /24s made it ~10 min).
While at least half the store is taken (*pressure*), a new code lives ``pressure_ttl`` seconds
instead of its normal lifetime (RFC 8628 lets the server choose ``expires_in``; the device is told).
A code gets the long lifetime only while fewer than ``total // 2`` codes are live, so at most half
the store ever holds long-lived codes; the rest expires within ``pressure_ttl`` of its issue. Hence
the guarantee: once a flood of any shape stops, a new device authorization (from a network not over
its own quota) succeeds within ``pressure_ttl`` seconds (120 by default), and every 503 of a full store
says ``Retry-After`` <= ``pressure_ttl`` (at least half of it was issued under pressure, settled or not).
Keeping new logins out longer takes a sustained flood of ``(total - total // 2) / pressure_ttl``
authorizations per second (~42/s by default) from at least ``total`` distinct networks.

Every operation is O(1) (amortised): codes sit in insertion-ordered dicts, one per lifetime (codes
of one lifetime expire in insertion order), per-group counts are kept as codes come and go,
and the groups are bucketed by size, so the largest network is found without a scan. Expired
codes linger ``LINGER_SECONDS`` to answer ``expired_token``, no longer counting against the
quotas, and are the first to go when the store is full.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from authlib.oauth2.rfc8628 import DeviceCredentialMixin

from ._state import digest

logger = logging.getLogger(__name__)


@dataclass
class DeviceCredential(DeviceCredentialMixin):
    """One pending device authorization (RFC 8628), as authlib's ``DeviceCredentialMixin``."""

    client_id: str
    scope: str | None
    user_code: str
    expires_at: float
    interval: int
    address: str = ""  # who asked for it (pending codes are bounded per address and per network)
    last_poll: float | None = None
    principal: str | None = None
    approved: bool | None = None  # None: pending; True: approved; False: denied
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    key: str = field(default="", repr=False)  # the store's key (hash of the device code)
    network: str = field(default="", repr=False)
    evictable: bool = field(default=False, repr=False)  # live and not yet settled
    settled_by: str | None = field(default=None, repr=False)  # the principal who approved or denied it
    queue: str = field(default="", repr=False)  # which lifetime queue holds it while live

    def get_client_id(self) -> str:
        return self.client_id

    def get_scope(self) -> str | None:
        return self.scope

    def get_user_code(self) -> str:
        return self.user_code

    def is_expired(self) -> bool:
        return self.expires_at <= time.time()

    def poll_too_fast(self) -> bool:
        """Record a poll; True (and the interval raised by 5 s, RFC 8628 §3.5) if it came too early."""
        with self.lock:
            now = time.monotonic()
            early = self.last_poll is not None and now - self.last_poll < self.interval
            self.last_poll = now
            if early:
                self.interval += 5
            return early


def normalize_user_code(user_code: str) -> str:
    """``abcd efgh`` / ``ABCDEFGH`` / ``abcd-efgh`` -> ``ABCD-EFGH``."""
    raw = "".join(ch for ch in (user_code or "").upper() if ch.isalnum())
    return f"{raw[:4]}-{raw[4:]}" if len(raw) == 8 else raw


def network_of(address: str) -> str:
    """The /24 (IPv4, also IPv4-mapped IPv6) or /64 (IPv6) holding ``address``; a non-IP address is its own."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.version == 4:
        a, b, c, _ = ip.packed
        return f"{a}.{b}.{c}.0/24"
    return f"{ipaddress.IPv6Address(ip.packed[:8] + bytes(8))}/64"


class _Groups:
    """Keys grouped by a label, each group oldest first, the groups ranked by size: all in O(1)."""

    def __init__(self) -> None:
        self.members: dict[str, OrderedDict[str, None]] = {}
        self._by_size: dict[int, OrderedDict[str, None]] = {}  # size -> groups of that size, as they reached it
        self._max = 0

    def add(self, group: str, key: str) -> None:
        keys = self.members.setdefault(group, OrderedDict())
        keys[key] = None
        self._resize(group, len(keys) - 1, len(keys))

    def remove(self, group: str, key: str) -> None:
        keys = self.members[group]
        del keys[key]
        self._resize(group, len(keys) + 1, len(keys))
        if not keys:
            del self.members[group]

    def size(self, group: str) -> int:
        keys = self.members.get(group)
        return len(keys) if keys is not None else 0

    def oldest(self, group: str) -> str:
        return next(iter(self.members[group]))

    def newest(self, group: str) -> str:
        return next(reversed(self.members[group]))

    def largest(self) -> tuple[str, int]:
        """The group holding the most keys (among equals, the last to reach that size) and its size; ("", 0) if none."""
        if not self._max:
            return "", 0
        return next(reversed(self._by_size[self._max])), self._max

    def _resize(self, group: str, old: int, new: int) -> None:
        if old:
            bucket = self._by_size[old]
            del bucket[group]
            if not bucket:
                del self._by_size[old]
        if new:
            self._by_size.setdefault(new, OrderedDict())[group] = None
        if new > self._max:
            self._max = new
        elif old == self._max and old not in self._by_size:
            self._max = new  # sizes move by one: the group itself now tops the next bucket (or none is left)


@dataclass(frozen=True)
class Settled:
    """A code was settled; ``withdrawn`` names the user codes of the principal's older settled codes it replaced."""

    withdrawn: tuple[str, ...] = ()


class DeviceStore:
    """Pending device codes, bounded per address, per network, per approving principal and overall
    (see the module docstring).

    Never per client id: every user of ``lakesession-cli`` shares that id, so a per-id bound
    is a lock-out anyone can trigger.
    """

    LINGER_SECONDS = 300

    def __init__(
        self,
        *,
        per_address: int = 0,
        per_network: int = 0,
        total: int = 10_000,
        per_principal: int = 5,
        pressure_ttl: float = 0,
    ) -> None:
        self.per_address = per_address  # 0: unbounded
        self.per_network = per_network  # 0: unbounded
        self.total = max(1, total)
        self.per_principal = max(1, per_principal)
        self.pressure_ttl = pressure_ttl  # 0: codes keep their own lifetime whatever the load
        self.high_water = self.total // 2  # at or above this many live codes, new ones live pressure_ttl
        self._lock = threading.Lock()
        self._by_device: dict[str, DeviceCredential] = {}
        self._by_user: dict[str, str] = {}
        # unexpired codes per lifetime ("normal", "pressure"), oldest (= first to expire) first
        self._queues: dict[str, OrderedDict[str, None]] = {"normal": OrderedDict(), "pressure": OrderedDict()}
        self._live = 0
        self._lingering: OrderedDict[str, None] = OrderedDict()  # expired codes kept to answer expired_token
        self._addresses = _Groups()  # live codes per address
        self._networks = _Groups()  # live codes per network
        self._evictable = _Groups()  # live, unsettled codes per network
        self._settled = _Groups()  # live, settled codes per principal, in the order they were settled

    def __len__(self) -> int:
        return len(self._by_device)

    def add(self, device_code: str, cred: DeviceCredential) -> tuple[int, float] | None:
        """Store ``cred`` (shortening its ``expires_at`` under pressure); None when stored, else (429 for an
        exhausted quota of this address or network, 503 when the store is full of codes it must keep, or on
        a user-code collision) and the seconds until a slot frees up."""
        with self._lock:
            now = time.time()
            self._expire(now)
            network = network_of(cred.address)
            for groups, label, bound in (
                (self._addresses, cred.address, self.per_address),
                (self._networks, network, self.per_network),
            ):
                if bound and groups.size(label) >= bound:  # a slot frees when the oldest or the newest expires
                    first, last = self._by_device[groups.oldest(label)], self._by_device[groups.newest(label)]
                    return 429, min(first.expires_at, last.expires_at) - now
            if cred.user_code in self._by_user:
                return 503, 1.0
            if len(self._by_device) >= self.total and not self._make_room(network):
                return 503, self._next_expiry(now) - now
            queue = "normal"
            if self.pressure_ttl and self._live >= self.high_water and cred.expires_at > now + self.pressure_ttl:
                cred.expires_at, queue = now + self.pressure_ttl, "pressure"
            key = digest(device_code)
            cred.key, cred.network, cred.evictable, cred.queue = key, network, True, queue
            self._by_device[key] = cred
            self._by_user[cred.user_code] = key
            self._queues[queue][key] = None
            self._live += 1
            self._addresses.add(cred.address, key)
            self._networks.add(network, key)
            self._evictable.add(network, key)
            return None

    def settle(self, cred: DeviceCredential, principal: str = "") -> Settled | None:
        """Mark ``cred`` as shown to and decided by ``principal`` (signed in): never evicted by others from now
        on. Past ``per_principal`` settled codes, the principal's oldest one is withdrawn (expires now).
        None if ``cred`` is no longer pending (evicted, expired or redeemed meanwhile)."""
        with self._lock:
            if self._by_device.get(cred.key) is not cred or not cred.queue:
                return None
            if cred.evictable:
                self._evictable.remove(cred.network, cred.key)
                cred.evictable = False
            withdrawn: list[str] = []
            if cred.settled_by is None:
                while self._settled.size(principal) >= self.per_principal:
                    old = self._by_device[self._settled.oldest(principal)]
                    self._withdraw(old, time.time())
                    withdrawn.append(old.user_code)
                cred.settled_by = principal
                self._settled.add(principal, cred.key)
            if withdrawn:
                logger.info("device approvals: withdrew %d older settled code(s) of one principal", len(withdrawn))
            return Settled(tuple(withdrawn))

    def by_device_code(self, device_code: str) -> DeviceCredential | None:
        with self._lock:
            return self._by_device.get(digest(device_code))

    def by_user_code(self, user_code: str) -> DeviceCredential | None:
        with self._lock:
            key = self._by_user.get(normalize_user_code(user_code))
            return self._by_device.get(key) if key else None

    def pop(self, device_code: str) -> DeviceCredential | None:
        """Remove and return a device code (single use)."""
        with self._lock:
            key = digest(device_code)
            return self._remove(key) if key in self._by_device else None

    def _make_room(self, network: str) -> bool:
        """Free one slot for a newcomer from ``network``: a lingering expired code, else the oldest
        unsettled code of the largest network if it holds more than one; False if none may go."""
        if self._lingering:
            self._remove(next(iter(self._lingering)))
            return True
        top, size = self._evictable.largest()
        own = self._evictable.size(network) + 1  # the newcomer counts for its own network
        if own >= size:
            top, size = network, own
        if size < 2:
            logger.info("device-code store full, no network holds more than one pending code: refused one")
            return False
        self._remove(self._evictable.oldest(top))
        logger.info("device-code store full: evicted the oldest pending code of network %s", top)
        return True

    def _next_expiry(self, now: float) -> float:
        """When the first live code expires (a slot frees up then)."""
        heads = [self._by_device[next(iter(q))].expires_at for q in self._queues.values() if q]
        return min(heads) if heads else now + 1

    def _withdraw(self, cred: DeviceCredential, now: float) -> None:
        """End a live code now: it lingers (its device is told ``expired_token``) and holds no room."""
        cred.expires_at = min(cred.expires_at, now)
        self._unlive(cred.key, cred)
        self._lingering[cred.key] = None

    def _remove(self, key: str) -> DeviceCredential:
        cred = self._by_device.pop(key)
        self._by_user.pop(cred.user_code, None)
        if cred.queue:
            self._unlive(key, cred)
        else:
            self._lingering.pop(key, None)
        return cred

    def _unlive(self, key: str, cred: DeviceCredential) -> None:
        del self._queues[cred.queue][key]
        cred.queue = ""
        self._live -= 1
        self._addresses.remove(cred.address, key)
        self._networks.remove(cred.network, key)
        if cred.evictable:
            self._evictable.remove(cred.network, key)
            cred.evictable = False
        if cred.settled_by is not None:
            self._settled.remove(cred.settled_by, key)

    def _expire(self, now: float) -> None:
        """Move codes that expired to the lingering list, and drop those that lingered long enough."""
        for queue in self._queues.values():
            while queue:
                key = next(iter(queue))
                cred = self._by_device[key]
                if cred.expires_at > now:
                    break
                self._unlive(key, cred)
                self._lingering[key] = None
        while self._lingering:
            key = next(iter(self._lingering))
            if self._by_device[key].expires_at >= now - self.LINGER_SECONDS:
                break
            self._remove(key)
