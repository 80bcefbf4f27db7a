"""Device authorizations per second in the issuer's pending-code store: empty vs. at the bound.

Issue 32 (item 2): at ~10,000 pending codes each authorization scanned the whole store
(~0.4 s). The store now keeps its counts incrementally, so a full store should cost about
what an empty one does. Three figures, same process, same calls:

* empty: a store with room, every call stored;
* at the bound, evicting: full, the newcomers' network holds the most codes (evicts its own oldest);
* at the bound, refusing: full of one-code networks, every newcomer refused (503).

    python benchmarks/device_store.py [--pending 10000] [--calls 20000]

``--soak`` floods a real reference catalog over loopback HTTP instead (issue 40, V16): one device
authorization from each of ``--networks`` distinct /24s (source addresses 127.a.b.1, as the server sees
them in production: from the socket), then a new user from another network asks for a code, honouring
each Retry-After, and the time from the flood's end to the user's 200 is checked against the bound
(``device_code_ttl_under_pressure``, ``--pressure-ttl``).

    python benchmarks/device_store.py --soak [--networks 12000] [--pending 10000] [--pressure-ttl 120]
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode, urlsplit

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


def soak(networks: int, pending: int, pressure_ttl: int, threads: int) -> int:
    """Flood a real catalog from ``networks`` /24s over HTTP; 0 if a new user then got a code within the bound."""
    from lakesession.reference import start
    from lakesession.reference.settings import AbuseLimits

    handle = start(
        data_dir=tempfile.mkdtemp(prefix="device-soak-"),
        abuse=AbuseLimits(device_pending_total=pending),
        device_code_ttl_under_pressure=pressure_ttl,
    )
    host, port = urlsplit(handle.uri).hostname or "127.0.0.1", urlsplit(handle.uri).port
    body = urlencode({"client_id": "lakesession-cli", "scope": "catalog"})
    headers = {"Content-Type": "application/x-www-form-urlencoded"}

    def authorize(address: str) -> tuple[int, dict[str, str], dict]:
        """One authorization from ``address`` (http.client: no TLS context to build per source address)."""
        conn = http.client.HTTPConnection(host, port, timeout=60, source_address=(address, 0))
        try:
            conn.request("POST", "/oidc/device_authorization", body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
        finally:
            conn.close()

    try:
        addresses = [f"127.{1 + (i >> 16)}.{i >> 8 & 255}.{i & 255 or 1}" for i in range(0, networks << 8, 256)]
        began = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            answers = list(pool.map(authorize, addresses))
        flood = time.perf_counter() - began
        ended = time.monotonic()
        statuses = Counter(status for status, _, _ in answers)
        waits = [int(h["retry-after"]) for status, h, _ in answers if status == 503]
        lives = Counter(b["expires_in"] for status, _, b in answers if status == 200)
        asks = 1
        while (r := authorize("127.250.0.1"))[0] == 503:
            asks += 1
            time.sleep(int(r[1]["retry-after"]))
        waited = time.monotonic() - ended
        print(f"flood: {networks:,} /24s over HTTP in {flood:.1f} s ({networks / flood:,.0f}/s), store {pending:,}")
        print(f"  answers {dict(statuses)}; code lifetimes {dict(lives)}; max Retry-After {max(waits, default=0)} s")
        print(f"new user: {r[0]} after {waited:.1f} s and {asks} request(s); bound {pressure_ttl} s")
        return 0 if r[0] == 200 and waited <= pressure_ttl + 2 else 1
    finally:
        handle.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=None, help="the store's bound (device_pending_total)")
    parser.add_argument("--calls", type=int, default=20_000, help="authorizations timed per figure")
    parser.add_argument("--soak", action="store_true", help="flood a real catalog over HTTP instead")
    parser.add_argument("--networks", type=int, default=12_000, help="--soak: distinct /24s flooding")
    parser.add_argument("--pressure-ttl", type=int, default=120, help="--soak: device_code_ttl_under_pressure")
    parser.add_argument("--threads", type=int, default=8, help="--soak: concurrent flooding connections")
    args = parser.parse_args()
    if args.soak:
        return soak(args.networks, args.pending or 10_000, args.pressure_ttl, args.threads)
    n, calls = args.pending or 10_000, args.calls

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
