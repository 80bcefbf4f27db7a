"""50 concurrent sessions loading, refreshing credentials and committing against `lakesession serve`.

    python benchmarks/load.py [--seconds 120] [--processes 10] [--threads 5] [--tables 5]
    python benchmarks/load.py --postgres [--workers 2]      # PostgreSQL store, N server processes

Starts ``lakesession serve --s3-emulator`` (this checkout's code, SQLite in a fresh data dir unless
``--postgres``), creates ``--tables`` tables and runs ``--processes`` × ``--threads`` sessions, each in
its own thread with its own keep-alive HTTP client and token, the client processes separate from the
server. Each session loops over one table: ``loadTable`` (vended credentials), ``GET …/credentials``
and an append commit (the body pyiceberg's fast append sends: ``assert-table-uuid`` and
``assert-ref-snapshot-id main``, then ``add-snapshot`` + ``set-snapshot-ref``), reloading and retrying on
409 until it lands, then waits for the rest of its ``--period`` (jittered), like a notebook that acts
every few seconds. Before the load one session alone measures the same operations (the idle figures).

The snapshots' manifest lists are not written (the catalog never reads them): the rows are counted
from the snapshot summaries, which the catalog chains through ``assert-ref-snapshot-id`` — a lost or
duplicated commit shows as a wrong ``total-records`` or a wrong number of snapshots.

Prints per-operation p50/p99 (idle and loaded), errors (only 409s are allowed, each retried to
success), the rows per table (exact), and whether every request is in the audit log (by request id,
read from the catalog's database). Targets on a 2-core machine: commit p50 <= 300 ms and loadTable
p99 <= 150 ms under 50 sessions. Exit status 0 only when nothing is lost and everything is audited.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NS = "load"
PREFIX = "lakesession"
TARGET_COMMIT_P50_MS = 300.0
TARGET_LOAD_P99_MS = 150.0
OPS = ("loadTable", "credentials", "commit", "append")

POLICY = """\
principals:
  - {name: loader, type: service, client_secret: loader-secret-1}
roles:
  - {name: writers, members: [loader]}
grants:
  - {role: writers, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))] * 1000


@dataclass
class Tally:
    """What one client process saw: latencies (s) per operation, statuses, request ids, rows committed."""

    lat: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    statuses: dict[str, int] = field(default_factory=dict)  # "op status" -> count
    errors: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows committed (acknowledged)
    commits: dict[str, int] = field(default_factory=dict)  # table -> commits acknowledged
    retries: int = 0
    unfinished: int = 0

    def merge(self, other: dict[str, Any]) -> None:
        for op, xs in other["lat"].items():
            self.lat[op] += xs
        for k, v in other["statuses"].items():
            self.statuses[k] = self.statuses.get(k, 0) + v
        self.errors += other["errors"]
        self.request_ids += other["request_ids"]
        for k, v in other["rows"].items():
            self.rows[k] = self.rows.get(k, 0) + v
        for k, v in other["commits"].items():
            self.commits[k] = self.commits.get(k, 0) + v
        self.retries += other["retries"]
        self.unfinished += other["unfinished"]


class Session:
    """One client session: its own keep-alive connection; every request carries a fresh X-Request-Id."""

    def __init__(self, base: str, token: str, tally: Tally, lock: threading.Lock):
        self.http = httpx.Client(
            base_url=base,
            headers={"Authorization": f"Bearer {token}", "X-Iceberg-Access-Delegation": "vended-credentials"},
            timeout=120,
        )
        self.tally = tally
        self.lock = lock

    def call(self, op: str, method: str, path: str, body: Any = None) -> httpx.Response:
        rid = uuid.uuid4().hex
        t0 = time.perf_counter()
        try:
            r = self.http.request(method, path, json=body, headers={"X-Request-Id": rid})
            r.read()
        except httpx.HTTPError as e:
            with self.lock:
                self.tally.errors.append(f"{op}: {type(e).__name__}: {e}")
            raise
        took = time.perf_counter() - t0
        with self.lock:
            self.tally.lat[op].append(took)
            key = f"{op} {r.status_code}"
            self.tally.statuses[key] = self.tally.statuses.get(key, 0) + 1
            self.tally.request_ids.append(rid)
            if r.status_code not in (200, 409):
                self.tally.errors.append(f"{op}: {r.status_code} {r.text[:300]}")
        return r

    def load(self, table: str) -> dict[str, Any]:
        r = self.call("loadTable", "GET", f"/v1/{PREFIX}/namespaces/{NS}/tables/{table}")
        if r.status_code != 200:
            raise RuntimeError(f"loadTable {r.status_code}")
        return r.json()["metadata"]  # type: ignore[no-any-return]

    def credentials(self, table: str) -> None:
        r = self.call("credentials", "GET", f"/v1/{PREFIX}/namespaces/{NS}/tables/{table}/credentials")
        if r.status_code != 200 or not r.json().get("storage-credentials"):
            raise RuntimeError(f"credentials {r.status_code}: {r.text[:200]}")

    def append(self, table: str, meta: dict[str, Any], rows: int, deadline: float) -> bool:
        """Commit ``rows`` rows, reloading and retrying on 409; False if the hard deadline passed first."""
        t0, attempt = time.perf_counter(), 0
        while True:
            r = self.call("commit", "POST", f"/v1/{PREFIX}/namespaces/{NS}/tables/{table}", append_body(meta, rows))
            if r.status_code == 200:
                with self.lock:
                    self.tally.lat["append"].append(time.perf_counter() - t0)
                    self.tally.rows[table] = self.tally.rows.get(table, 0) + rows
                    self.tally.commits[table] = self.tally.commits.get(table, 0) + 1
                return True
            if r.status_code != 409:
                raise RuntimeError(f"commit {r.status_code}")
            if time.monotonic() > deadline:
                with self.lock:
                    self.tally.unfinished += 1
                return False
            with self.lock:
                self.tally.retries += 1
            # Iceberg's own commit retry: exponential backoff from 100 ms (commit.retry.min-wait-ms), jittered
            time.sleep(min(2.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.0))
            attempt += 1
            meta = self.load(table)

    def close(self) -> None:
        self.http.close()


def append_body(meta: dict[str, Any], rows: int) -> dict[str, Any]:
    """What pyiceberg's fast append commits (one new snapshot on main), built from the loaded metadata."""
    parent = meta.get("current-snapshot-id")
    parent = None if parent in (None, -1) else parent
    total = 0
    if parent is not None:
        snap = next(s for s in meta["snapshots"] if s["snapshot-id"] == parent)
        total = int(snap["summary"].get("total-records", "0"))
    sid = random.getrandbits(62)
    seq = int(meta.get("last-sequence-number", 0)) + 1
    snapshot: dict[str, Any] = {
        "snapshot-id": sid,
        "sequence-number": seq,
        "timestamp-ms": max(int(time.time() * 1000), int(meta.get("last-updated-ms", 0)) + 1),
        "manifest-list": f"{meta['location']}/metadata/snap-{sid}-0-{uuid.uuid4()}.avro",
        "summary": {
            "operation": "append",
            "added-records": str(rows),
            "total-records": str(total + rows),
            "added-data-files": "1",
        },
        "schema-id": meta.get("current-schema-id", 0),
    }
    if parent is not None:
        snapshot["parent-snapshot-id"] = parent
    return {
        "requirements": [
            {"type": "assert-table-uuid", "uuid": meta["table-uuid"]},
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent},
        ],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": sid},
        ],
    }


def session_loop(
    s: Session, table: str, until: float, period: float, rows: int, iterations: int | None, hard_deadline: float
) -> None:
    n = 0
    time.sleep(random.uniform(0, period))  # spread the sessions' start over one period
    while time.monotonic() < until and (iterations is None or n < iterations):
        start = time.monotonic()
        meta = s.load(table)
        s.credentials(table)
        if not s.append(table, meta, rows, hard_deadline):
            return
        n += 1
        rest = period * random.uniform(0.8, 1.2) - (time.monotonic() - start)
        if rest > 0 and iterations is None:
            time.sleep(rest)


def client_process(args: dict[str, Any], out: Any) -> None:
    """One client process: ``threads`` sessions; the tally goes back through ``out`` (a pipe)."""
    tally, lock = Tally(), threading.Lock()
    sessions = [Session(args["base"], args["token"], tally, lock) for _ in range(args["threads"])]
    until = args["until"]
    hard = until + args["grace"]

    def run(i: int) -> None:
        table = args["tables"][(args["first"] + i) % len(args["tables"])]
        try:
            session_loop(sessions[i], table, until, args["period"], args["rows"], args.get("iterations"), hard)
        except Exception as e:
            with lock:
                tally.errors.append(f"session {args['first'] + i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sessions:
        s.close()
    out.send(json.dumps(tally.__dict__))
    out.close()


def run_clients(
    base: str, token: str, tables: list[str], processes: int, threads: int, seconds: float, period: float, **kw: Any
) -> Tally:
    """``processes`` × ``threads`` sessions in separate processes (spawned: nothing of the server inherited)."""
    ctx = mp.get_context("spawn")
    until = time.monotonic() + seconds  # CLOCK_MONOTONIC is system-wide on Linux: children share it
    procs, pipes = [], []
    for p in range(processes):
        recv, send = ctx.Pipe(duplex=False)
        a = dict(base=base, token=token, tables=tables, threads=threads, first=p * threads, until=until)
        a.update(period=period, rows=kw.get("rows", 10), grace=kw.get("grace", 60), iterations=kw.get("iterations"))
        proc = ctx.Process(target=client_process, args=(a, send), daemon=True)
        proc.start()
        procs.append(proc)
        pipes.append(recv)
    total = Tally()
    for proc, recv in zip(procs, pipes, strict=True):
        total.merge(json.loads(recv.recv()))
        proc.join(30)
    return total


def cpu_seconds(root: int) -> float:
    """CPU time (user + system) of process ``root`` and its live descendants (workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += [p for p, (ppid, _) in stats.items() if ppid == pid]
    return total


def audited_ids(db_url: str, since: float) -> set[str]:
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT DISTINCT request_id FROM ls_audit WHERE ts >= :t"), {"t": since}).all()
    finally:
        engine.dispose()
    return {r[0] for r in rows}


class Server:
    """``lakesession serve`` in a subprocess."""

    def __init__(self, data: Path, db_url: str | None, workers: int, credential_ttl: int, source: str | None = None):
        from tests._serve import Served

        (data / "policy.yaml").write_text(POLICY)
        self.db_url = db_url or f"sqlite:///{data / 'shared' / 'catalog.db'}"
        args = ["--port", "0", "--data-dir", str(data / "shared"), "--bootstrap", str(data / "policy.yaml")]
        args += [
            "--warehouse",
            "s3://load-lake/wh",
            "--s3-emulator",
            "--credential-ttl",
            str(credential_ttl),
            "--db",
            self.db_url,
        ]
        if workers > 1:
            args += ["--workers", str(workers)]
        self.served = [Served(args, env={"PYTHONPATH": source} if source else None)]
        self.uri = self.served[0].uri

    def token(self) -> str:
        return self.served[0].token("loader", "loader-secret-1")

    def admin_token(self) -> str:
        return self.served[0].admin_token()

    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.served]

    def stop(self) -> None:
        for s in self.served:
            s.stop()


def setup_tables(uri: str, token: str, n: int) -> list[str]:
    h = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=uri, headers=h, timeout=60) as c:
        r = c.post(f"/v1/{PREFIX}/namespaces", json={"namespace": [NS]})
        assert r.status_code == 200, r.text
        names = [f"t{i}" for i in range(n)]
        for name in names:
            r = c.post(f"/v1/{PREFIX}/namespaces/{NS}/tables", json={"name": name, "schema": SCHEMA})
            assert r.status_code == 200, r.text
    return names


def verify_rows(uri: str, token: str, tables: list[str], tally: Tally) -> list[str]:
    """Each table's current snapshot counts exactly the acknowledged rows, one snapshot per commit."""
    problems = []
    with httpx.Client(base_url=uri, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        for name in tables:
            meta = c.get(f"/v1/{PREFIX}/namespaces/{NS}/tables/{name}").json()["metadata"]
            cur = meta.get("current-snapshot-id")
            snaps = {s["snapshot-id"]: s for s in meta.get("snapshots", [])}
            chain, sid = 0, cur
            while sid not in (None, -1):
                chain += 1
                sid = snaps[sid].get("parent-snapshot-id")
            total = int(snaps[cur]["summary"]["total-records"]) if cur not in (None, -1) else 0
            want_rows, want_commits = tally.rows.get(name, 0), tally.commits.get(name, 0)
            ok = total == want_rows and chain == want_commits
            print(
                f"  {name}: {total} rows in {chain} snapshots; acknowledged {want_rows} rows in {want_commits} commits"
            )
            if not ok:
                problems.append(
                    f"{name}: table has {total} rows/{chain} snapshots, clients saw {want_rows}/{want_commits}"
                )
    return problems


def print_table(title: str, tally: Tally, wall: float) -> None:
    print(f"\n{title}")
    header = f"  {'operation':<12} {'count':>7} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'ops/s':>7}"
    print(header)
    for op in OPS:
        xs = tally.lat[op]
        mx = max(xs) * 1000 if xs else float("nan")
        print(f"  {op:<12} {len(xs):>7} {pct(xs, 50):>9.1f} {pct(xs, 99):>9.1f} {mx:>9.1f} {len(xs) / wall:>7.1f}")


def print_cpu(cpu: float, tally: Tally, wall: float) -> None:
    """Server CPU per request: what the catalog costs, much less sensitive to a busy machine than latency."""
    n = sum(len(tally.lat[op]) for op in ("loadTable", "credentials", "commit"))
    print(
        f"  server CPU {cpu:.1f} s in {wall:.0f} s ({100 * cpu / wall:.0f}% of a core), {1000 * cpu / max(n, 1):.2f} ms per request"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120, help="length of the loaded run (default 120)")
    ap.add_argument("--processes", type=int, default=10, help="client processes (default 10)")
    ap.add_argument("--threads", type=int, default=5, help="sessions per client process (default 5)")
    ap.add_argument("--tables", type=int, default=5, help="tables the sessions share (default 5)")
    ap.add_argument("--period", type=float, default=2.0, help="seconds between a session's cycles (default 2)")
    ap.add_argument("--idle", type=int, default=30, help="cycles of the single idle session first (default 30)")
    ap.add_argument("--postgres", action="store_true", help="PostgreSQL (a throwaway server) instead of SQLite")
    ap.add_argument("--workers", type=int, default=1, help="server processes (serve --workers; PostgreSQL only)")
    ap.add_argument("--credential-ttl", type=int, default=900, help="vended credential lifetime (default 900)")
    ap.add_argument("--server-source", metavar="DIR", help="run the server from this source tree (a baseline)")
    ap.add_argument("--profile", metavar="FILE", help="record the server with py-spy into FILE (speedscope json)")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT))

    with tempfile.TemporaryDirectory(prefix="lakesession-load-") as tmp:
        db_url = None
        if args.postgres:
            from tests._pg import new_database

            db_url = new_database("load")
        server = Server(Path(tmp), db_url, args.workers, args.credential_ttl, args.server_source)
        spy = None
        try:
            token = server.token()
            tables = setup_tables(server.uri, server.admin_token(), args.tables)
            print(
                f"lakesession serve at {server.uri} ({'PostgreSQL' if args.postgres else 'SQLite'}, "
                f"{args.workers} worker(s), S3 emulator), python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
            )
            since = time.time() - 1
            root = server.pids()[0]
            cpu0 = cpu_seconds(root)
            t0 = time.monotonic()
            idle = run_clients(server.uri, token, tables[:1], 1, 1, 3600, 0.0, iterations=args.idle)
            idle_wall = time.monotonic() - t0
            cpu1 = cpu_seconds(root)
            if args.profile:
                import subprocess

                spy = subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "-o",
                        args.profile,
                        "-f",
                        "speedscope",
                        "-r",
                        "50",
                        "-s",
                        "--pid",
                        str(server.pids()[0]),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            sessions = args.processes * args.threads
            t0 = time.monotonic()
            loaded = run_clients(server.uri, token, tables, args.processes, args.threads, args.seconds, args.period)
            wall = time.monotonic() - t0
            cpu2 = cpu_seconds(root)
            if spy is not None:
                import signal

                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            print_table(f"idle: 1 session, {args.idle} cycles on one table", idle, idle_wall)
            print_cpu(cpu1 - cpu0, idle, idle_wall)
            print_table(
                f"loaded: {sessions} sessions ({args.processes} processes x {args.threads} threads), "
                f"{args.tables} tables, {args.seconds:.0f} s, a cycle every ~{args.period:g} s per session",
                loaded,
                wall,
            )
            print_cpu(cpu2 - cpu1, loaded, wall)
            total = Tally()
            total.merge(idle.__dict__)
            total.merge(loaded.__dict__)
            codes = ", ".join(f"{k}: {v}" for k, v in sorted(total.statuses.items()))
            print(f"\nstatuses: {codes}")
            print(f"409s retried: {total.retries}; appends unfinished at the deadline: {total.unfinished}")
            print(f"errors (anything but 200/409): {len(total.errors)}")
            for e in total.errors[:10]:
                print(f"  {e}")
            print("rows:")
            problems = verify_rows(server.uri, server.admin_token(), tables, total)
            audited = audited_ids(server.db_url, since)
            missing = [r for r in total.request_ids if r not in audited]
            print(f"audit: {len(total.request_ids) - len(missing)} of {len(total.request_ids)} client requests audited")
        finally:
            if spy is not None and spy.poll() is None:
                spy.kill()
            server.stop()

    commit_p50, load_p99 = pct(loaded.lat["commit"], 50), pct(loaded.lat["loadTable"], 99)
    print(
        f"\ncommit p50 {commit_p50:.1f} ms (idle {pct(idle.lat['commit'], 50):.1f} ms, target <= "
        f"{TARGET_COMMIT_P50_MS:.0f}): {'OK' if commit_p50 <= TARGET_COMMIT_P50_MS else 'OVER TARGET'}"
    )
    print(
        f"loadTable p99 {load_p99:.1f} ms (idle {pct(idle.lat['loadTable'], 99):.1f} ms, target <= "
        f"{TARGET_LOAD_P99_MS:.0f}): {'OK' if load_p99 <= TARGET_LOAD_P99_MS else 'OVER TARGET'}"
    )
    sound = not problems and not missing and not total.errors and not total.unfinished
    print(f"nothing lost, only 409s, all retried, every request audited: {'YES' if sound else 'NO'}")
    for p in problems:
        print(f"  {p}")
    return 0 if sound else 1


if __name__ == "__main__":
    raise SystemExit(main())
