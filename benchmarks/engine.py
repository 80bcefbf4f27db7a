"""The trusted engine's cost: an aggregate over a DEFINER view through the engine vs the user's own Spark.

    python benchmarks/engine.py            # 1 M rows, median of 5, 8 concurrent users
    python benchmarks/engine.py --quick    # smoke run (tiny sizes)

One reference catalog on the S3 emulator trusting the ``engine`` principal; etl writes
``sales.orders`` (id, region, amount; regions EU/US/APAC in turn); bob creates the DEFINER view
``sales.v_eu`` (the EU rows) through the engine. Grants: alice (and ``reader01``… for the
concurrency part) VIEW_READ on the view only; dana TABLE_READ_DATA on ``sales.orders``.

* own Spark (the baseline): dana's ``session.sql(...)`` in this process's Spark (``local[2]``):
  includes ``sql()``'s view check, the JVM's planning, its Iceberg catalog behind dana's gateway
  (loadTable, vended credentials), the scan and the aggregate;
* engine: alice's ``session.sql(...)`` over the view, which the session routes to the engine
  (``lakesession engine``, its own process and JVM, also ``local[2]``): includes the notebook's
  routing check (is a DEFINER view read? a dry-run expansion against the catalog), the gRPC front
  door (token check, sandbox, view expansion as alice, the chain catalog's configuration), the
  JVM's planning through alice's per-user gateway and the chain-scoped catalog (loadTable with
  ``referenced-by``), the scan and the aggregate, and Arrow batches back over gRPC.

Both sides run the same query plan over the same files with the same master and shuffle
partitions; warm-up runs (first JVM compilation, per-user gateways, Connect sessions) are excluded,
and the two sides alternate so machine noise hits them alike. Every result is checked against
the count, sum and mean computed from the rows written: a benchmark of wrong answers is worthless.
A second pass times each side's steps apart (``parts``: the engine's routing check, ``engine.sql()``
and ``collect()``; the own side's ``sql()`` and ``collect()``), to show where a difference comes from.
Then ``--users`` distinct principals (each its own Session, Connect session, per-user gateway and
token exchange on the engine) each run the view aggregate ``--queries`` times at once, from
threads of this process (their client work shares the machine's cores with the engine); as a
reference, as many threads run the direct aggregate on dana's own Spark (one SparkSession, the same
``local[2]``), and the throughput ratio own ÷ engine is printed.

The engine process is started here with its CLI (``python -m lakesession.engine._cli``), as an
operator would, not through ``tests._engine`` (test fixtures change with the tests; the launch is
a dozen lines).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc
import yaml

import lakesession
from lakesession.reference import bootstrap, start

TARGET = 1.3
#: the engine's cost per query over the user's own Spark (median engine − median own), in ms
OVERHEAD_TARGET_MS = 50.0
MASTER = "local[2]"
SHUFFLE_PARTITIONS = "2"
BUCKET = "bench-engine"
ENGINE_SECRET = "engine-bench-secret-29"
REGIONS = ("EU", "US", "APAC")
VIEW_SQL = "SELECT id, amount FROM sales.orders WHERE region = 'EU'"
OWN_QUERY = "SELECT count(*) AS n, sum(amount) AS total, avg(amount) AS mean FROM lake.sales.orders WHERE region = 'EU'"
VIEW_QUERY = "SELECT count(*) AS n, sum(amount) AS total, avg(amount) AS mean FROM lake.sales.v_eu"


def secret(who: str) -> str:
    return f"{who}-bench-secret-29"


def policy(readers: list[str]) -> bootstrap.Bootstrap:
    """etl manages the catalog; engine may exchange tokens; bob reads ``sales`` and creates views there;
    alice and the readers may read only the view; dana reads the table directly."""
    users = ["bob", "alice", "dana", *readers]
    doc = {
        "principals": [
            {"name": "etl", "type": "service", "client_id": "etl", "client_secret": secret("etl")},
            {"name": "engine", "type": "service", "client_id": "engine", "client_secret": ENGINE_SECRET},
            *({"name": u, "type": "user", "client_id": u, "client_secret": secret(u)} for u in users),
        ],
        "roles": [
            {"name": "eng", "members": ["etl"]},
            {"name": "engines", "members": ["engine"]},
            {"name": "analysts", "members": ["bob"]},
            {"name": "eu-readers", "members": ["alice", *readers]},
            {"name": "direct", "members": ["dana"]},
        ],
        "grants": [
            {"role": "eng", "privilege": "CATALOG_MANAGE_CONTENT", "on": "catalog"},
            {"role": "engines", "privilege": "TOKEN_EXCHANGE", "on": "catalog"},
            *(
                {"role": "analysts", "privilege": p, "on": "namespace sales"}
                for p in ("TABLE_READ_DATA", "TABLE_LIST", "VIEW_CREATE", "VIEW_LIST")
            ),
            {"role": "eu-readers", "privilege": "VIEW_READ", "on": "view sales.v_eu"},
            {"role": "direct", "privilege": "TABLE_READ_DATA", "on": "table sales.orders"},
        ],
    }
    return bootstrap.parse(yaml.safe_dump(doc, sort_keys=False))


def orders(start_id: int, n: int) -> pa.Table:
    """Rows ``start_id`` … ``start_id + n - 1``: region by id mod 3, amounts in quarters (exact float sums)."""
    ids = pa.array(range(start_id, start_id + n), pa.int64())
    region = pa.array([REGIONS[i % 3] for i in range(start_id, start_id + n)])
    amount = pc.divide(pc.cast(pc.add(pc.multiply(pc.bit_wise_and(ids, 4095), 3), 1), pa.float64()), 4.0)
    return pa.table({"id": ids, "region": region, "amount": amount})


def write_orders(handle: Any, rows: int, files: int) -> tuple[int, float]:
    """etl creates ``sales.orders`` with pyiceberg (vended credentials) in ``files`` appends; the EU (count, sum)."""
    from pyiceberg.catalog.rest import RestCatalog

    etl = RestCatalog(
        "etl",
        uri=handle.uri,
        warehouse=handle.warehouse,
        credential=f"etl:{secret('etl')}",
        **{
            "oauth2-server-uri": f"{handle.issuer_uri}/token",
            "header.X-Iceberg-Access-Delegation": "vended-credentials",
        },
    )
    etl.create_namespace("sales")
    table = None
    count, total = 0, 0.0
    per_file = -(-rows // files)
    for first in range(0, rows, per_file):
        batch = orders(first, min(per_file, rows - first))
        if table is None:
            table = etl.create_table("sales.orders", schema=batch.schema)
        table.append(batch)
        eu = batch.filter(pc.equal(batch["region"], "EU"))
        count += eu.num_rows
        total += pc.sum(eu["amount"]).as_py() or 0.0
    return count, total


class EngineProcess:
    """``lakesession engine`` for a catalog on a free loopback port, launched now; ``ready()`` waits for it.

    Launched before the data is written and the own Spark starts, so the two JVMs boot side by side.
    """

    def __init__(self, handle: Any, log: Path) -> None:
        options = (
            f"--catalog {handle.uri} --warehouse {handle.warehouse} --client-id engine --issuer {handle.issuer_uri} "
            f"--port 0 --master {MASTER} --conf spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS} --print-ready"
        )
        cmd = [sys.executable, "-m", "lakesession.engine._cli", *options.split()]
        env = {**os.environ, "LAKESESSION_ENGINE_CLIENT_SECRET": ENGINE_SECRET}
        self.log = log
        self.started = time.perf_counter()
        with log.open("w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)

    def ready(self, timeout: float = 300.0) -> str:
        """The engine's ``sc://`` address, once it prints ``READY``."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("READY "):
                return line.split(" ", 1)[1].strip()
            if not line and self.proc.poll() is not None:
                break
        raise SystemExit(f"the engine did not start (exit {self.proc.poll()}):\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def login(handle: Any, who: str, **options: Any) -> lakesession.Session:
    return lakesession.connect(
        uri=handle.uri,
        warehouse=handle.warehouse,
        credential=f"{who}:{secret(who)}",
        token_url=f"{handle.issuer_uri}/token",
        **options,
    )


def check(rows: list[Any], expected: tuple[int, float], who: str) -> None:
    """The aggregate's one row equals what was written (count and sum exactly: amounts are quarters)."""
    count, total = expected
    assert len(rows) == 1, f"{who}: {rows}"
    n, s, mean = rows[0][0], rows[0][1], rows[0][2]
    assert (n, s) == (count, total), f"{who}: got count {n}, sum {s}; expected {count}, {total}"
    assert abs(mean - total / count) <= 1e-9 * abs(total / count), f"{who}: mean {mean} != {total / count}"


def timed(run: Callable[[], list[Any]]) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    rows = run()
    return time.perf_counter() - t0, rows


def nearest_rank(values: list[float], q: float) -> float:
    """The ``q`` quantile by nearest rank (the smallest value with at least ``q`` of them at or below it)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def concurrent(
    runs: list[Callable[[], list[Any]]], queries: int, expected: tuple[int, float]
) -> tuple[int, float, list[float]]:
    """Each of ``runs`` in its own thread, ``queries`` times, all released at once; (queries, wall s, latencies)."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    gate = threading.Barrier(len(runs) + 1)

    def user(run: Callable[[], list[Any]], name: str) -> None:
        gate.wait()
        try:
            for _ in range(queries):
                took, rows = timed(run)
                check(rows, expected, name)
                with lock:
                    latencies.append(took)
        except BaseException as exc:  # raised below, after every thread has finished
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=user, args=(r, f"user-{i}")) for i, r in enumerate(runs)]
    for t in threads:
        t.start()
    gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return len(latencies), wall, latencies


def view_aggregate(session: lakesession.Session) -> Callable[[], list[Any]]:
    return lambda: session.sql(VIEW_QUERY).collect()


def describe(n: int, wall: float, latencies: list[float]) -> str:
    return (
        f"{n} queries in {wall:.1f} s, {n / wall:.2f} queries/s, p50 {statistics.median(latencies):.2f} s, "
        f"p95 {nearest_rank(latencies, 0.95):.2f} s, max {max(latencies):.2f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4, help="data files written (appends)")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--queries", type=int, default=5, help="queries per user in the concurrent part")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per side first")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3,000 rows, 2 users, tiny repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.files, args.users, args.queries, args.repeat, args.warmup = 3000, 1, 2, 2, 2, 1
    for var in [k for k in os.environ if k.startswith("AWS_")]:
        os.environ.pop(var)
    readers = [f"reader{i + 1:02d}" for i in range(args.users)]
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as data:
        handle = start(
            warehouse=f"s3://{BUCKET}/wh",
            s3_emulator=True,
            data_dir=data,
            bootstrap=policy(readers),
            trusted_engines=[{"principal": "engine"}],
        )
        sessions: list[lakesession.Session] = []
        engine: EngineProcess | None = None
        try:
            engine = EngineProcess(handle, Path(data) / "engine.log")
            t0 = time.perf_counter()
            expected = write_orders(handle, args.rows, args.files)
            print(
                f"wrote {args.rows:,} rows in {args.files} file(s) in {time.perf_counter() - t0:.1f} s; "
                f"EU rows {expected[0]:,}, sum {expected[1]:,.2f}",
                flush=True,
            )
            dana = login(
                handle,
                "dana",
                master=MASTER,
                spark_conf={"spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS, "spark.ui.enabled": "false"},
            )
            sessions.append(dana)
            t0 = time.perf_counter()
            dana.spark()
            print(f"own Spark (dana, {MASTER}) started in {time.perf_counter() - t0:.1f} s", flush=True)
            own = lambda: dana.sql(OWN_QUERY).collect()  # noqa: E731
            # the own side's first (cold) warm-up runs while the engine finishes starting: untimed either way
            background = ThreadPoolExecutor(1)
            first_warmup = background.submit(lambda: check(own(), expected, "own Spark warm-up"))
            address = engine.ready()
            print(f"engine ({MASTER}) ready {time.perf_counter() - engine.started:.1f} s after launch", flush=True)
            bob = login(handle, "bob", engine=address)
            try:
                bob.engine().sql(
                    f"CREATE VIEW lake.sales.v_eu TBLPROPERTIES ('trino.run-as-owner' = 'bob') AS {VIEW_SQL}"
                ).collect()
            finally:
                bob.close()
            alice = login(handle, "alice", engine=address)
            sessions.append(alice)
            via_engine = lambda: alice.sql(VIEW_QUERY).collect()  # noqa: E731
            first_warmup.result()  # raises what the warm-up raised
            background.shutdown()
            for i in range(args.warmup):
                if i:
                    check(own(), expected, "own Spark warm-up")
                check(via_engine(), expected, "engine warm-up")
            print(
                f"own Spark side: dana's session.sql() in this process's Spark ({MASTER}, {SHUFFLE_PARTITIONS} shuffle "
                "partitions): sql()'s view check, parsing, analysis, loadTable through her gateway, scan, aggregate\n"
                f"engine side: alice's session.sql() routed to the engine process ({MASTER}, {SHUFFLE_PARTITIONS} "
                "shuffle partitions): the notebook's routing check, the gRPC front door (token, sandbox, view expansion "
                "as alice, signing), analysis through the chain catalog and alice's per-user gateway on the engine "
                "(loadTable with referenced-by), scan, aggregate, Arrow batches back over gRPC",
                flush=True,
            )
            times: dict[str, list[float]] = {"own": [], "engine": []}
            for _ in range(args.repeat):  # alternating, so machine noise hits both sides alike
                for side, run in (("own", own), ("engine", via_engine)):
                    took, rows = timed(run)
                    check(rows, expected, side)
                    times[side].append(took)
            own_s, engine_s = statistics.median(times["own"]), statistics.median(times["engine"])
            ratio = engine_s / own_s
            print(
                "own Spark runs (s): "
                + " ".join(f"{t:.3f}" for t in times["own"])
                + "; engine runs (s): "
                + " ".join(f"{t:.3f}" for t in times["engine"]),
                flush=True,
            )
            print(
                f"aggregate over {args.rows} rows: own Spark (direct grant) {own_s:.2f} s, "
                f"engine (DEFINER view) {engine_s:.2f} s, ratio {ratio:.2f} (target <= {TARGET}) "
                f"[{'met' if ratio <= TARGET else 'MISSED'}; medians of {args.repeat}, "
                f"{args.warmup} warm-up(s) each excluded; results checked]",
                flush=True,
            )
            # each engine run follows an own run: their differences pair runs that met the same machine load
            paired_ms = statistics.median(e - o for o, e in zip(times["own"], times["engine"], strict=True)) * 1000
            best_ms = (min(times["engine"]) - min(times["own"])) * 1000  # a busy machine only adds time: best runs
            print(
                f"per-query overhead of the engine over own Spark: {paired_ms:.0f} ms (median of the paired differences; "
                f"target <= {OVERHEAD_TARGET_MS:.0f} ms) [{'met' if paired_ms <= OVERHEAD_TARGET_MS else 'MISSED'}]; "
                f"best run against best run {best_ms:.0f} ms; medians' difference {(engine_s - own_s) * 1000:.0f} ms",
                flush=True,
            )
            breakdown(dana, alice, args.repeat, expected)
            readers_sessions = [login(handle, r, engine=address) for r in readers]
            sessions += readers_sessions
            for s in readers_sessions:  # each user's first query: token exchange, gateway, Connect session
                check(s.sql(VIEW_QUERY).collect(), expected, "reader warm-up")
            n, wall, latencies = concurrent([view_aggregate(s) for s in readers_sessions], args.queries, expected)
            print(
                f"{args.users} concurrent users: {describe(n, wall, latencies)} (engine; distinct principals, each "
                "its own Session, Connect session, token exchange and per-user gateway; clients are threads here)",
                flush=True,
            )
            # reference: the same load on dana's own Spark (one SparkSession, the same local[2]) from as many threads
            n_own, wall_own, lat_own = concurrent([own] * args.users, args.queries, expected)
            print(
                f"reference, {args.users} threads on own Spark (direct grant): {describe(n_own, wall_own, lat_own)}; "
                f"throughput ratio own/engine {(n_own / wall_own) / (n / wall):.2f}",
                flush=True,
            )
            print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        finally:
            for s in sessions:
                s.close()
            if engine is not None:
                engine.stop()
            handle.stop()
    return 0


def breakdown(dana: lakesession.Session, alice: lakesession.Session, repeat: int, expected: tuple[int, float]) -> None:
    """Each side's steps timed apart (medians of ``repeat``), alternating like the main measurement.

    Own Spark: ``sql()`` (its view check, parsing, analysis: loadTable through dana's gateway) then
    ``collect()`` (planning, the scan, the aggregate). Engine: the notebook's routing check (a dry-run
    expansion: is a DEFINER view read?), ``engine.sql()`` (one gRPC call: the front door expands the
    view, the JVM analyses the signed SQL, loading the table through the chain catalog) and ``collect()``
    (a second call: Spark Connect sends the SQL relation again; the front door takes the first call's expansion
    from its cache, and the JVM analyses it again before planning, scanning and aggregating; Arrow batches back
    over gRPC).
    """
    from lakesession._engineclient import definer_views

    engine = alice.engine()
    parts: dict[str, list[float]] = {k: [] for k in ("own sql", "own collect", "route", "engine sql", "engine collect")}
    for _ in range(repeat):
        t0 = time.perf_counter()
        df = dana.sql(OWN_QUERY)
        t1 = time.perf_counter()
        check(df.collect(), expected, "own Spark, in parts")
        t2 = time.perf_counter()
        definer_views(alice, VIEW_QUERY)
        t3 = time.perf_counter()
        edf = engine.sql(VIEW_QUERY)
        t4 = time.perf_counter()
        check(edf.collect(), expected, "engine, in parts")
        t5 = time.perf_counter()
        for key, took in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
            parts[key].append(took)
    m = {k: statistics.median(v) for k, v in parts.items()}
    own_total, engine_total = m["own sql"] + m["own collect"], m["route"] + m["engine sql"] + m["engine collect"]
    print(
        f"parts (medians of {repeat}): own Spark: sql() {m['own sql']:.3f} s + collect() {m['own collect']:.3f} s "
        f"= {own_total:.3f} s; engine: routing check {m['route']:.3f} s + engine.sql() {m['engine sql']:.3f} s "
        f"+ collect() {m['engine collect']:.3f} s = {engine_total:.3f} s (ratio of the sums "
        f"{engine_total / own_total:.2f})",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
