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
every few seconds. Before the load one session alone measures the same operations (the idle figures),
after one untimed cycle per table (a table's first credentials cost an STS call).

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
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _loadclients import NS, OPS, PREFIX, Tally, pct, run_clients

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

TARGET_COMMIT_P50_MS = 300.0
TARGET_LOAD_P99_MS = 150.0

POLICY = """\
principals:
  - {name: loader, type: service, client_secret: loader-secret-1}
roles:
  - {name: writers, members: [loader]}
grants:
  - {role: writers, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


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


def http_parser() -> str:
    """What uvicorn picks in the server (same interpreter and path): httptools (C) if installed, else h11."""
    import importlib.util

    return "httptools" if importlib.util.find_spec("httptools") else "h11 (pure Python: pip install httptools)"


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def audited_ids(db_url: str, since: float) -> set[str]:
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT DISTINCT request_id FROM ls_audit WHERE ts >= :t"), {"t": since}).all()
    finally:
        engine.dispose()
    return {r[0] for r in rows}


def sts_calls(db_url: str, since: float) -> tuple[int, int]:
    """(credential issues, STS calls among them) from the audit: every load or refresh that vended
    records ``cache_hit``; a miss is one ``AssumeRole`` (the catalog reuses an STS credential only while
    >= 90 % of its lifetime remains, so under load almost every issue is a hit)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT detail FROM ls_audit WHERE ts >= :t AND decision = 'issued' AND detail LIKE '%cache_hit%'"
                ),
                {"t": since},
            ).all()
    finally:
        engine.dispose()
    details = [json.loads(r[0]) for r in rows]
    return len(details), sum(1 for d in details if not d.get("cache_hit"))


class Server:
    """``lakesession serve`` in a subprocess; the S3/STS emulator inside the server (``"inline"``:
    ``serve --s3-emulator``) or in a process of its own (``"process"``, as S3 is its own service anywhere)."""

    def __init__(
        self,
        data: Path,
        db_url: str | None,
        workers: int,
        credential_ttl: int,
        source: str | None = None,
        emulator: str = "inline",
    ):
        from tests._serve import Served

        (data / "policy.yaml").write_text(POLICY)
        self.db_url = db_url or f"sqlite:///{data / 'shared' / 'catalog.db'}"
        args = ["--port", "0", "--data-dir", str(data / "shared"), "--bootstrap", str(data / "policy.yaml")]
        args += ["--warehouse", "s3://load-lake/wh", "--credential-ttl", str(credential_ttl), "--db", self.db_url]
        # the server imports this checkout (or ``source``) first, then whatever the caller's PYTHONPATH adds
        path = [source or str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {"LAKESESSION_SERVER_TIMING": "1", "PYTHONPATH": os.pathsep.join(path)}
        self.emulator: subprocess.Popen[str] | None = None
        if emulator == "inline":
            args.append("--s3-emulator")
        else:
            self.emulator = subprocess.Popen(
                [sys.executable, "-m", "lakesession.reference.storage.emulator", "load-lake"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self.emulator.stdout is not None
            info = json.loads(self.emulator.stdout.readline())
            args += [
                "--s3-role-arn",
                info["role_arn"],
                "--s3-endpoint",
                info["endpoint"],
                "--s3-region",
                info["region"],
            ]
            # the catalog's own keys (AWS default chain): the emulator's admin pair, fake outside it
            env.update(AWS_ACCESS_KEY_ID=info["access_key_id"], AWS_SECRET_ACCESS_KEY=info["secret_access_key"])
        if workers > 1:
            args += ["--workers", str(workers)]
        here = os.getcwd()
        os.chdir(source or here)  # `python -m` puts the working directory first on sys.path
        try:
            self.served = [Served(args, env=env)]
        finally:
            os.chdir(here)
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
        if self.emulator is not None:
            assert self.emulator.stdin is not None
            self.emulator.stdin.close()  # the emulator serves until its stdin closes
            try:
                self.emulator.wait(10)
            except subprocess.TimeoutExpired:
                self.emulator.kill()


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


def print_split(tally: Tally) -> None:
    """Where the time went (Server-Timing): queued in the server before the route ran, handled by the route,
    and outside the server's ASGI app (network, uvicorn's event loop, the client process itself)."""
    print(
        f"  {'split (ms)':<12} {'queue p50/p99':>15} {'app p50/p99':>15} {'(audit) p50/p99':>17} {'outside p50/p99':>17}"
    )
    for op in ("loadTable", "credentials", "commit"):
        q, a, w, o = tally.queue[op], tally.app[op], tally.audit[op], tally.outside[op]
        if q:
            print(
                f"  {op:<12} {pct(q, 50):>6.1f}/{pct(q, 99):<8.1f} {pct(a, 50):>6.1f}/{pct(a, 99):<8.1f} "
                f"{pct(w, 50):>8.1f}/{pct(w, 99):<8.1f} {pct(o, 50):>8.1f}/{pct(o, 99):<8.1f}"
            )
    lag = tally.gil_lag
    if lag:
        print(
            f"  client processes: a sleeping thread wakes {pct(lag, 50):.1f}/{pct(lag, 99):.1f} ms late (p50/p99) "
            "(its wait for the process's GIL and a core)"
        )


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
    ap.add_argument(
        "--emulator",
        choices=("process", "inline"),
        default="inline",
        help="S3/STS emulator inline (default: serve --s3-emulator; moto shares the catalog's GIL) or in a "
        "process of its own (as S3 is in any deployment)",
    )
    ap.add_argument("--server-source", metavar="DIR", help="run the server from this source tree (a baseline)")
    ap.add_argument("--profile", metavar="FILE", help="record the server with py-spy into FILE (speedscope json)")
    ap.add_argument("--profile-gil", action="store_true", help="with --profile: only samples holding the GIL")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT))

    with tempfile.TemporaryDirectory(prefix="lakesession-load-") as tmp:
        db_url = None
        if args.postgres:
            from tests._pg import new_database

            db_url = new_database("load")
        server = Server(Path(tmp), db_url, args.workers, args.credential_ttl, args.server_source, args.emulator)
        spy = None
        try:
            token = server.token()
            tables = setup_tables(server.uri, server.admin_token(), args.tables)
            print(
                f"lakesession serve at {server.uri} ({'PostgreSQL' if args.postgres else 'SQLite'}, "
                f"{args.workers} worker(s), S3 emulator {args.emulator}), python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
                f"load average {loadavg()} at the start, HTTP parser {http_parser()}"
            )
            since = time.time() - 1
            root = server.pids()[0]
            # one cycle per table first (not timed): the first credentials of each table cost an STS call
            warm = run_clients(server.uri, token, tables, 1, len(tables), 3600, 0.0, iterations=1)
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
                        *(["--gil"] if args.profile_gil else []),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            sessions = args.processes * args.threads
            t0 = time.monotonic()
            loaded = run_clients(server.uri, token, tables, args.processes, args.threads, args.seconds, args.period)
            wall = time.monotonic() - t0
            cpu2 = cpu_seconds(root)
            load_after = loadavg()
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
            print_split(loaded)
            print(f"  load average at the end of the loaded run: {load_after} (the machine is shared: note it)")
            total = Tally()
            total.merge(warm.__dict__)
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
            issues, sts = sts_calls(server.db_url, since)
            sts_per_1000 = 1000 * sts / max(issues, 1)
            print(
                f"STS calls per 1,000 credential loads: {sts_per_1000:.2f} ({sts} AssumeRole for {issues} loads and "
                f"refreshes that vended; target <= 2): {'OK' if sts_per_1000 <= 2 else 'OVER TARGET'}"
            )
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
