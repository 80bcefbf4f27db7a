"""Device authorizations per second in the issuer's pending-code store: empty vs. at the bound.

Issue 32 (item 2): at ~10,000 pending codes each authorization scanned the whole store
(~0.4 s). The store now keeps its counts incrementally, so a full store should cost about
what an empty one does. Three figures, same process, same calls:

* empty: a store with room, every call stored;
* at the bound, evicting: full, the newcomers' network holds the most codes (evicts its own oldest);
* at the bound, refusing: full of one-code networks, every newcomer refused (503).

    python benchmarks/device_store.py [--pending 10000] [--calls 20000]
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lakesession.reference.idp._devices import DeviceCredential, DeviceStore


def credential(address: str, user_code: str) -> DeviceCredential:
    return DeviceCredential("lakesession-cli", "catalog", user_code, time.time() + 600, 5, address=address)


def rate(store: DeviceStore, addresses: list[str], tag: str) -> tuple[float, int]:
    """(authorizations per second, how many were stored) for one call per address."""
    codes = [(secrets.token_urlsafe(32), credential(a, f"{tag}{i:08d}")) for i, a in enumerate(addresses)]
    began = time.perf_counter()
    stored = sum(store.add(code, cred) is None for code, cred in codes)
    return len(codes) / (time.perf_counter() - began), stored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=10_000, help="the store's bound (device_pending_total)")
    parser.add_argument("--calls", type=int, default=20_000, help="authorizations timed per figure")
    args = parser.parse_args()
    n, calls = args.pending, args.calls

    def spread(k: int, per_net: int) -> list[str]:  # k addresses, per_net of them in each /24
        return [f"10.{(i // per_net) >> 8 & 255}.{(i // per_net) & 255}.{i % per_net}" for i in range(k)]

    empty = DeviceStore(total=n + calls)
    empty_rate, _ = rate(empty, spread(calls, 16), "E")

    evicting = DeviceStore(per_network=0, total=n)
    rate(evicting, spread(n, 16), "F")
    evict_rate, stored = rate(evicting, [f"172.16.0.{i % 250}" for i in range(calls)], "N")
    assert stored == calls and len(evicting) == n

    refusing = DeviceStore(total=n)
    rate(refusing, spread(n, 1), "F")
    refuse_rate, stored_r = rate(refusing, [f"172.17.{i >> 8 & 255}.{i & 255}" for i in range(calls)], "N")
    assert stored_r == 0 and len(refusing) == n

    print(f"device authorizations/s, {calls:,} calls each, bound {n:,} pending codes")
    print(f"  empty store            {empty_rate:12,.0f}/s  ({1e6 / empty_rate:.1f} µs each)")
    print(f"  at the bound, evicting {evict_rate:12,.0f}/s  ({1e6 / evict_rate:.1f} µs each)")
    print(f"  at the bound, refusing {refuse_rate:12,.0f}/s  ({1e6 / refuse_rate:.1f} µs each)")
    print(f"ratio at-bound/empty: evicting {evict_rate / empty_rate:.2f}, refusing {refuse_rate / empty_rate:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
