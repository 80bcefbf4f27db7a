"""loadTable and createTable latency of the reference catalog, next to a trivial endpoint of the same app.

    python benchmarks/catalog_load.py [--requests 1000] [--clients 16] [--snapshots 5] [--creates 300]
    python benchmarks/catalog_load.py --postgres           # the catalog's state in PostgreSQL (throwaway server)
    python benchmarks/catalog_load.py --baseline 99600be   # createTable p50: that commit vs this tree

Starts a catalog (uvicorn in a background thread of this process; SQLite, or PostgreSQL with
``--postgres``; file:// warehouse), creates a namespace and a table with a few snapshots through
pyiceberg, then measures ``GET /v1/lakesession/namespaces/ns/tables/t`` (bearer token, keep-alive
httpx client per thread) and ``GET /healthz`` with 1 client and with ``--clients`` concurrent
clients. The clients run in a separate process (spawned), so they never compete with the server
for its GIL; the server's process is tuned as ``lakesession serve`` tunes itself. Prints p50/p99 latency, requests/s and the loadTable/trivial ratio. Targets: a
single-client loadTable p50 of at most 5 ms; at ``--clients`` clients a loadTable p99 at most 3x
its p50, and at least the single-client requests/s.

createTable: ``--creates`` single-client ``POST …/namespaces/ns/tables`` (a fresh name each,
default location), the p50 printed. ``--baseline REV`` also exports ``REV`` (``git archive``)
and measures createTable there in a child process, alternating runs (``--rounds``) and keeping
each side's best p50, then prints both and the ratio (target <= 1.2x: the storage-ownership
index adds two indexed queries and an insert per create).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

# runnable from a checkout; LAKESESSION_BENCH_SOURCE points a child run at an exported baseline tree
SOURCE = os.environ.get("LAKESESSION_BENCH_SOURCE") or str(Path(__file__).resolve().parents[1])
sys.path.insert(0, SOURCE)

os.environ.setdefault("PYICEBERG_DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE", "true")

TARGET_P50_MS = 5.0
TARGET_CREATE_RATIO = 1.2
TARGET_TAIL_RATIO = 3.0  # p99 / p50 at --clients clients


@dataclass
class Result:
    name: str
    clients: int
    latencies: list[float]  # seconds
    wall: float

    @property
    def requests(self) -> int:
        return len(self.latencies)

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))] * 1000

    @property
    def p50(self) -> float:
        return self.pct(50)

    @property
    def p99(self) -> float:
        return self.pct(99)

    @property
    def rps(self) -> float:
        return self.requests / self.wall


def run(
    base_url: str, path: str, headers: dict[str, str], clients: int, per_client: int, warmup: int
) -> tuple[list[float], float]:
    """``clients`` threads, each with its own keep-alive client, each sending ``per_client`` requests."""
    barrier = threading.Barrier(clients + 1)
    results: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []

    def worker(i: int) -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
            for _ in range(warmup):
                client.get(path)
            barrier.wait()
            out = results[i]
            for _ in range(per_client):
                t0 = time.perf_counter()
                r = client.get(path)
                r.read()
                out.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    errors.append(f"{path}: {r.status_code} {r.text[:200]}")
                    return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"benchmark request failed: {errors[0]}")
    return [x for r in results for x in r], wall


def _client_process(args: tuple[Any, ...], out: Any) -> None:
    """The body of the client process: ``run`` there, the latencies back through a pipe."""
    lat, wall = run(*args)
    out.send((lat, wall))
    out.close()


def run_elsewhere(
    base_url: str, path: str, headers: dict[str, str], clients: int, per_client: int, warmup: int
) -> tuple[list[float], float]:
    """``run`` in a separate (spawned) process: the clients never share the server's GIL."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_client_process, args=((base_url, path, headers, clients, per_client, warmup), send))
    proc.start()
    send.close()
    try:
        lat, wall = recv.recv()
    except EOFError:
        raise SystemExit(f"the client process failed (exit code {proc.join(30) or proc.exitcode})") from None
    proc.join(30)
    return lat, wall


def seed(handle, snapshots: int) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    c = handle.admin_credentials
    cat = RestCatalog(
        "bench",
        uri=handle.uri,
        warehouse=handle.warehouse,
        credential=f"{c.client_id}:{c.client_secret}",
        **{"oauth2-server-uri": f"{handle.issuer_uri}/token"},
    )
    cat.create_namespace("ns")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
    )
    table = cat.create_table(("ns", "t"), schema, properties={"owner": "bench"})
    for i in range(snapshots):
        table.append(
            pa.table(
                {
                    "id": pa.array(range(i * 100, (i + 1) * 100), pa.int64()),
                    "name": [f"n{j}" for j in range(100)],
                    "amount": [j / 3 for j in range(100)],
                }
            )
        )
    meta = cat.load_table(("ns", "t")).metadata
    return table.metadata_location, len(meta.snapshots)


def create_latencies(handle: Any, n: int, warmup: int = 20) -> list[float]:
    """``n`` single-client createTable calls (default location, a fresh name each) after ``warmup``."""
    token = handle.admin.token_for("admin", ttl=24 * 3600)
    path = f"/v1/{handle.settings.catalog_name}/namespaces/ns/tables"
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    out: list[float] = []
    with httpx.Client(base_url=handle.uri, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        if client.head(f"/v1/{handle.settings.catalog_name}/namespaces/ns").status_code != 204:
            client.post(f"/v1/{handle.settings.catalog_name}/namespaces", json={"namespace": ["ns"]})
        for i in range(warmup + n):
            t0 = time.perf_counter()
            r = client.post(path, json={"name": f"c{i}_{time.monotonic_ns()}", "schema": schema})
            r.read()
            if r.status_code != 200:
                raise SystemExit(f"createTable failed: {r.status_code} {r.text[:200]}")
            if i >= warmup:
                out.append(time.perf_counter() - t0)
    return out


def create_only(n: int) -> float:
    """createTable p50 (ms) of the code on ``sys.path`` — the body of a ``--baseline`` child run."""
    from lakesession.reference import start

    handle = start()
    try:
        return Result("createTable", 1, create_latencies(handle, n), 1.0).p50
    finally:
        handle.stop()


def baseline_p50s(rev: str, n: int, rounds: int) -> tuple[float, float]:
    """(baseline, current) best createTable p50 over ``rounds`` alternating child runs."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="lakesession-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", str(repo), "archive", rev], check=True, capture_output=True).stdout
        tar_path = Path(tmp) / "src.tar"
        tar_path.write_bytes(archive)
        with tarfile.open(tar_path) as tar:
            tar.extractall(Path(tmp) / "src", filter="data")
        best = {"baseline": float("inf"), "current": float("inf")}
        for _ in range(rounds):
            for side, src in (("baseline", str(Path(tmp) / "src")), ("current", str(repo))):
                env = {**os.environ, "LAKESESSION_BENCH_SOURCE": src, "PYTHONPATH": src}
                out = subprocess.run(
                    [sys.executable, __file__, "--create-only", "--creates", str(n)],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=tmp,
                ).stdout
                best[side] = min(best[side], json.loads(out.strip().splitlines()[-1])["create_p50_ms"])
    return best["baseline"], best["current"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000, help="single-client requests per endpoint (default 1000)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    ap.add_argument("--per-client", type=int, default=None, help="requests per concurrent client (default requests/5)")
    ap.add_argument("--snapshots", type=int, default=5, help="snapshots in the benchmark table (default 5)")
    ap.add_argument("--warmup", type=int, default=50, help="warm-up requests per client (default 50)")
    ap.add_argument("--creates", type=int, default=300, help="single-client createTable calls (default 300)")
    ap.add_argument("--postgres", action="store_true", help="keep the catalog's state in PostgreSQL (throwaway)")
    ap.add_argument("--baseline", metavar="REV", help="also measure createTable at git revision REV and compare")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds for --baseline (default 3)")
    ap.add_argument("--create-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    per_client = args.per_client or max(1, args.requests // 5)
    if args.create_only:
        print(json.dumps({"create_p50_ms": create_only(args.creates), "source": SOURCE}))
        return 0

    from lakesession.reference import start

    db = None
    if args.postgres:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests._pg import new_database

        db = new_database("catalog_load")
    handle = start(db=db)
    try:
        location, n_snapshots = seed(handle, args.snapshots)
        try:  # this process is now only the server: tune it as `lakesession serve` tunes itself
            from lakesession.reference.workers import freeze_startup_objects

            freeze_startup_objects()
        except ImportError:  # an older tree
            pass
        token = handle.admin.token_for("admin", ttl=24 * 3600)
        auth = {"Authorization": f"Bearer {token}"}
        prefix = handle.settings.catalog_name
        load_path = f"/v1/{prefix}/namespaces/ns/tables/t"
        size = len(httpx.get(handle.uri + load_path, headers=auth).content)
        endpoints = [("loadTable", load_path, auth), ("healthz", "/healthz", {})]

        results: dict[tuple[str, int], Result] = {}
        for clients, n in ((1, args.requests), (args.clients, per_client)):
            for name, path, headers in endpoints:
                lat, wall = run_elsewhere(handle.uri, path, headers, clients, n, args.warmup)
                results[(name, clients)] = Result(name, clients, lat, wall)
        creates = Result("createTable", 1, create_latencies(handle, args.creates), 1.0)
    finally:
        handle.stop()

    print(
        f"reference catalog at {handle.uri} (uvicorn in this process, {'PostgreSQL' if db else 'SQLite'}; "
        f"clients in a separate process), python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    print(f"table ns.t: {n_snapshots} snapshots, LoadTableResult {size} bytes, metadata {location.rsplit('/', 1)[-1]}")
    print()
    header = f"{'endpoint':<10} {'clients':>7} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}"
    print(header)
    print("-" * len(header))
    for (name, clients), r in results.items():
        print(f"{name:<10} {clients:>7} {r.requests:>8} {r.p50:>8.2f} {r.p99:>8.2f} {r.rps:>8.0f}")
    print()
    for clients in (1, args.clients):
        lt, hz = results[("loadTable", clients)], results[("healthz", clients)]
        print(
            f"loadTable/healthz, {clients:>2} client(s): p50 x{lt.p50 / hz.p50:.2f}, p99 x{lt.p99 / hz.p99:.2f}, "
            f"req/s x{lt.rps / hz.rps:.2f}"
        )
    print(f"createTable  1 client: {creates.requests} creates, p50 {creates.p50:.2f} ms, p99 {creates.p99:.2f} ms")
    ok = True
    if args.baseline:
        base, cur = baseline_p50s(args.baseline, args.creates, args.rounds)
        ratio = cur / base
        ok = ratio <= TARGET_CREATE_RATIO
        print(
            f"createTable p50, best of {args.rounds} alternating runs: {args.baseline} {base:.2f} ms, "
            f"this tree {cur:.2f} ms, x{ratio:.2f} (target <= x{TARGET_CREATE_RATIO}): {'OK' if ok else 'OVER TARGET'}"
        )
    single, many = results[("loadTable", 1)], results[("loadTable", args.clients)]
    verdict = "OK" if single.p50 <= TARGET_P50_MS else "OVER TARGET"
    print(f"\nsingle-client loadTable p50 {single.p50:.2f} ms (target <= {TARGET_P50_MS:.0f} ms): {verdict}")
    tail_ok = many.p99 <= TARGET_TAIL_RATIO * many.p50
    rate_ok = many.rps >= single.rps
    print(
        f"{args.clients}-client loadTable p99/p50 x{many.p99 / many.p50:.2f} (target <= x{TARGET_TAIL_RATIO:g}): "
        f"{'OK' if tail_ok else 'OVER TARGET'}; req/s {many.rps:.0f} vs {single.rps:.0f} with 1 client "
        f"(target >=): {'OK' if rate_ok else 'UNDER TARGET'}"
    )
    return 0 if single.p50 <= TARGET_P50_MS and ok and tail_ok and rate_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
