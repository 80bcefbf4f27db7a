"""Token and credential refresh under 32 threads sharing one session.

Figures: refreshes issued per expiry (target 1; a client without single flight would
issue up to 32) and the p99 wait of a caller while a refresh is in flight, next to the
p99 of calls when nothing is due (baseline, same run).

    python benchmarks/refresh.py [--seconds 12] [--threads 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lakesession.reference import bootstrap, start

POLICY = """
principals:
  - {name: etl, type: service, client_id: etl, client_secret: refresh-bench-1}
roles:
  - {name: eng, members: [etl]}
grants:
  - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""


def hammer(call, threads: int, seconds: float) -> list[tuple[float, float]]:  # type: ignore[no-untyped-def]
    """(start time, wait ms) of every call made by ``threads`` threads for ``seconds``."""
    out: list[tuple[float, float]] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker() -> None:
        mine = []
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            call()
            mine.append((t0, (time.perf_counter() - t0) * 1000))
            time.sleep(0.001)
        with lock:
            out.extend(mine)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def p99(xs: list[float]) -> float:
    """The 99th percentile (the maximum below 100 samples; 0 for none, e.g. every call waited)."""
    if not xs:
        return 0.0
    return statistics.quantiles(xs, n=100)[98] if len(xs) >= 100 else max(xs)


def report(name: str, samples: list[tuple[float, float]], refreshes: int, expiries: float, threads: int) -> None:
    slow = [w for _, w in samples if w > 1.0]  # calls that waited for a refresh in flight
    fast = [w for _, w in samples if w <= 1.0]
    print(
        f"{name}: {len(samples)} calls, {refreshes} refreshes over {expiries:.1f} lifetimes "
        f"= {refreshes / max(expiries, 1):.2f} per expiry (target 1; without single flight up to {threads})"
    )
    if slow:
        print(
            f"   p99 wait during a refresh {p99(slow):7.2f} ms ({len(slow)} calls waited)   "
            f"p99 when nothing is due {p99(fast):6.3f} ms   ratio {p99(slow) / max(p99(fast), 1e-3):.0f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--ttl", type=int, default=4)
    args = parser.parse_args()
    if args.ttl < 2:
        # tokens are refreshed 1 s (MIN_MARGIN) ahead of expiry: a 1 s lifetime is due on every call
        parser.error("--ttl must be at least 2 (seconds): the refresh margin is 1 s")
    from lakesession.catalog._pyiceberg import rest_catalog
    from lakesession.catalog._tables import load_table
    from lakesession.credentials import CredentialStore
    from lakesession.identity import ClientCredentials

    with tempfile.TemporaryDirectory() as tmp:
        handle = start(
            warehouse="s3://refresh-bench/wh",
            s3_emulator=True,
            credential_ttl=args.ttl,
            access_token_ttl=args.ttl,
            data_dir=tmp,
            bootstrap=bootstrap.parse(POLICY),
        )
        try:
            token_requests = [0]

            def count(request: httpx.Request) -> None:
                token_requests[0] += 1

            source = ClientCredentials(
                f"{handle.issuer_uri}/token",
                "etl",
                "refresh-bench-1",
                scope="catalog",
                http_options={"event_hooks": {"request": [count]}},
            )
            source.token()
            token_requests[0] = 0
            samples = hammer(source.token, args.threads, args.seconds)
            report("access token", samples, token_requests[0], args.seconds / args.ttl, args.threads)

            cat = rest_catalog("bench", handle.uri, source, warehouse="lakesession")
            cat.create_namespace("b")
            from pyiceberg.schema import Schema
            from pyiceberg.types import LongType, NestedField

            cat.create_table(("b", "t"), Schema(NestedField(1, "x", LongType(), required=False)))
            store = CredentialStore()
            table = load_table(cat, ("b", "t"), store, source.token, handle.uri)
            name = next(iter(store.tables()))
            path = table.location() + "/data/x.parquet"
            before = sum(r["refreshes"] for r in store.snapshot())
            samples = hammer(lambda: store.credential_for(name, path), args.threads, args.seconds)
            after = sum(r["refreshes"] for r in store.snapshot())
            report("table credentials", samples, after - before, args.seconds / args.ttl, args.threads)
            store.close()
        finally:
            handle.stop()


if __name__ == "__main__":
    main()
