"""A victim's loadTable while 16 authenticated attackers hammer `lakesession serve` with cheap requests.

    python benchmarks/load_under_attack.py [--seconds 15] [--attackers 16] [--postgres] [--server-source DIR]
        [--period S ...] [--gate both|on|off] [--concurrency K]

Starts ``lakesession serve`` (this checkout's code, or ``--server-source``; SQLite in a fresh data dir, or a
throwaway PostgreSQL with ``--postgres``) with a victim principal (``ana``, reader of ``bench.t``), attacker
principals (``pest00`` …, each its own valid token and a few grants) and ``--grants`` unrelated grants, the
way a real catalog's grant table looks. The victim (one keep-alive client in a process of its own) loads
``bench.t`` every ``--period`` seconds, first alone (the baseline), then while ``--attackers`` threads (in
``--attacker-processes`` processes) send ``GET /v1/config``, ``GET …/namespaces`` and ``HEAD …/tables/t``
back to back with their valid tokens, and once more alone at the end. The server runs with
``LAKESESSION_SERVER_TIMING=1``: the victim's latency is split into time queued in the server and time
handling the request.

The whole measurement runs twice, on a server with the fair admission gate off (``admission.enabled:
false``) and on (the default; ``--gate`` picks one), and for each victim period (``--period``, repeatable;
default 20 ms, a busy client, and 200 ms, a person's notebook). Server-Timing's ``gate`` is the victim's wait
at the gate (part of ``queue``).

Prints the victim's p50/p99/max side by side (alone, attacked), the ratio attacked ÷ alone measured in this
run, the attackers' request rate and the server's CPU per request, then a summary line per (gate, period).
Target: victim p99 <= 30 ms under 16 attackers (a 2-core machine). Exit status 0 when every request was
answered as expected.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _loadclients import pct, server_timing  # noqa: E402

TARGET_P99_MS = 30.0
NS, TABLE, PREFIX = "bench", "t", "lakesession"
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
SECRET = "pw-under-attack-1"
GATE_ENV = "LAKESESSION_SERVE__ADMISSION__ENABLED"


def policy(attackers: int, grants: int) -> str:
    """The victim, the attackers (one principal each, in a role of their own) and unrelated grants."""
    pests = ", ".join(f"pest{i:02d}" for i in range(attackers))
    lines = ["principals:", f"  - {{name: ana, type: user, client_secret: {SECRET}}}"]
    lines += [f"  - {{name: pest{i:02d}, type: user, client_secret: {SECRET}}}" for i in range(attackers)]
    lines += ["roles:", "  - {name: readers, members: [ana]}", f"  - {{name: pests, members: [{pests}]}}"]
    lines += ["  - {name: others}", "grants:"]
    lines += ["  - {role: readers, privilege: TABLE_READ_PROPERTIES, on: table bench.t}"]
    lines += ["  - {role: readers, privilege: TABLE_READ_DATA, on: table bench.t}"]
    lines += ["  - {role: pests, privilege: NAMESPACE_LIST, on: catalog}"]
    lines += ["  - {role: pests, privilege: TABLE_LIST, on: namespace bench}"]
    lines += [f"  - {{role: others, privilege: TABLE_READ_DATA, on: table other{i}.t}}" for i in range(grants)]
    return "\n".join(lines) + "\n"


@dataclass
class Figures:
    """One victim run: latencies and the server's split of them (seconds)."""

    lat: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    app: list[float] = field(default_factory=list)
    gate: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def line(self, label: str) -> str:
        return (
            f"{label:22} {len(self.lat):6d} {pct(self.lat, 50):8.2f} {pct(self.lat, 99):8.2f} "
            f"{max(self.lat, default=0) * 1000:8.1f} {pct(self.queue, 99):9.2f} {pct(self.gate, 99):8.2f} "
            f"{pct(self.app, 99):8.2f}"
        )


def victim(uri: str, token: str, seconds: float, period: float, out: Any) -> None:
    """The victim's process: one keep-alive client loading the table every ``period`` seconds."""
    fig = Figures()
    path = f"/v1/{PREFIX}/namespaces/{NS}/tables/{TABLE}"
    with httpx.Client(base_url=uri, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        for _ in range(20):  # the connection and the server's caches, unmeasured
            c.get(path)
        end = time.perf_counter() + seconds
        nxt = time.perf_counter()
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            r = c.get(path)
            fig.lat.append(time.perf_counter() - t0)
            if r.status_code != 200:
                fig.errors.append(f"loadTable {r.status_code}: {r.text[:200]}")
            split = server_timing(r.headers.get("server-timing", ""))
            fig.queue.append(split.get("queue", 0.0))
            fig.app.append(split.get("app", 0.0))
            fig.gate.append(split.get("gate", 0.0))
            nxt += period
            time.sleep(max(0.0, nxt - time.perf_counter()))
    out.send(fig.__dict__)
    out.close()


def attackers(uri: str, tokens: list[str], stop: Any, out: Any) -> None:
    """One attacker process: a thread per token sending cheap valid requests back to back until ``stop``.

    Sends back how many it sent, the first refusals, and each response's ``Server-Timing`` (seconds; the
    admission test reads the gate's figures). A process of its own: threads in a busy process (a test
    worker holding a JVM's gateway threads) could not keep up a flood, and no queue would form."""
    counts: list[int] = [0] * len(tokens)
    bad: list[str] = []
    timings: list[dict[str, float]] = []
    paths = [
        ("GET", "/v1/config?warehouse=lakesession", 200),
        ("GET", f"/v1/{PREFIX}/namespaces", 200),
        ("HEAD", f"/v1/{PREFIX}/namespaces/{NS}/tables/{TABLE}", 204),
    ]

    def run(i: int) -> None:
        with httpx.Client(base_url=uri, headers={"Authorization": f"Bearer {tokens[i]}"}, timeout=60) as c:
            while not stop.is_set():
                method, path, want = paths[counts[i] % len(paths)]
                r = c.request(method, path)
                counts[i] += 1
                if r.status_code != want and len(bad) < 5:
                    bad.append(f"{method} {path}: {r.status_code} {r.text[:200]}")
                timings.append(server_timing(r.headers.get("server-timing", "")))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(tokens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.send((sum(counts), bad, timings))
    out.close()


def run_victim(uri: str, token: str, seconds: float, period: float) -> Figures:
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=victim, args=(uri, token, seconds, period, send))
    proc.start()
    send.close()
    fig = Figures(**recv.recv())
    proc.join(30)
    return fig


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    alone: Figures
    attacked: Figures
    after: Figures
    attack_requests: int
    attack_seconds: float
    cpu_ms_per_request: float
    errors: list[str]

    @property
    def ratio_p99(self) -> float:
        return pct(self.attacked.lat, 99) / pct(self.alone.lat, 99)

    @property
    def ratio_p50(self) -> float:
        return pct(self.attacked.lat, 50) / pct(self.alone.lat, 50)


class Attack:
    """The attacker processes (``processes`` of them, the tokens dealt round-robin), flooding until ``stop()``."""

    def __init__(self, uri: str, tokens: list[str], processes: int):
        ctx = mp.get_context("spawn")
        self.stop_event = ctx.Event()
        self.procs: list[Any] = []
        self.pipes: list[Any] = []
        for k in range(processes):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=attackers, args=(uri, tokens[k::processes], self.stop_event, send))
            p.start()
            send.close()
            self.procs.append(p)
            self.pipes.append(recv)

    def stop(self) -> tuple[int, list[str], list[dict[str, float]]]:
        """Stop the flood: requests sent, the first refusals, every response's ``Server-Timing``."""
        self.stop_event.set()
        total, bad, timings = 0, [], []
        for recv in self.pipes:
            n, b, t = recv.recv()
            total, bad, timings = total + n, bad + b, timings + t
        for p in self.procs:
            p.join(30)
        return total, bad, timings

    def kill(self) -> None:
        """After a failure: no attacker outlives the test."""
        self.stop_event.set()
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()


def measure(
    uri: str,
    victim_token: str,
    tokens: list[str],
    seconds: float,
    period: float,
    processes: int,
    pid: int,
    profile: str | None = None,
) -> Result:
    """Victim alone, victim under attack, victim alone again; the attackers' rate and the server's CPU."""
    alone = run_victim(uri, victim_token, seconds, period)
    attack = Attack(uri, tokens, processes)
    time.sleep(2.0)  # the attackers' connections and token caches
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    spy = None
    if profile:  # the server's stacks while attacked (py-spy's collapsed format: one stack and its count a line)
        cmd = ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--output", profile, "--rate", "250", "--gil"]
        spy = subprocess.Popen([*cmd, "--duration", str(int(seconds))], stdout=subprocess.DEVNULL)
    attacked = run_victim(uri, victim_token, seconds, period)
    attack.stop_event.set()
    if spy is not None:
        spy.wait(60)
    total, bad, _ = attack.stop()
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    after = run_victim(uri, victim_token, seconds, period)
    served = total + len(attacked.lat)
    errors = alone.errors + attacked.errors + after.errors + bad
    return Result(alone, attacked, after, total, wall, cpu / max(1, served) * 1000, errors)


class Stack:
    """``lakesession serve`` with the policy above, the table created, the tokens minted."""

    def __init__(self, tmp: Path, args: argparse.Namespace, *, gate: bool = True):
        from tests._serve import Served

        db = None
        if args.postgres:
            from tests._pg import new_database

            db = new_database("attack")
        (tmp / "policy.yaml").write_text(policy(args.attackers, args.grants))
        cli = ["--port", "0", "--data-dir", str(tmp / "data"), "--bootstrap", str(tmp / "policy.yaml")]
        cli += ["--warehouse", (tmp / "wh").as_uri()] + (["--db", db] if db else [])
        (tmp / "wh").mkdir()
        source = args.server_source or str(ROOT)
        path = [source, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        here = os.getcwd()
        os.chdir(source)  # `python -m` puts the working directory first on sys.path
        try:
            env = {"LAKESESSION_SERVER_TIMING": "1", "PYTHONPATH": os.pathsep.join(path)}
            if not args.server_source:  # a tree from before the gate refuses its settings: it runs as it is
                env[GATE_ENV] = "true" if gate else "false"
                if args.concurrency is not None:
                    env[GATE_ENV.replace("ENABLED", "CONCURRENCY")] = str(args.concurrency)
            self.served = Served(cli, env=env)
        finally:
            os.chdir(here)
        self.store = "PostgreSQL" if db else "SQLite"
        admin = {"Authorization": f"Bearer {self.served.admin_token()}"}
        with httpx.Client(base_url=self.served.uri, headers=admin, timeout=60) as c:
            assert c.post(f"/v1/{PREFIX}/namespaces", json={"namespace": [NS]}).status_code == 200
            r = c.post(f"/v1/{PREFIX}/namespaces/{NS}/tables", json={"name": TABLE, "schema": SCHEMA})
            assert r.status_code == 200, r.text
        self.victim = self.served.token("ana", SECRET)
        self.tokens = [self.served.token(f"pest{i:02d}", SECRET) for i in range(args.attackers)]

    def close(self) -> None:
        self.served.stop()


def report(res: Result, attackers: int) -> list[str]:
    head = (
        f"{'victim loadTable':22} {'count':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'queue p99':>9} "
        f"{'gate p99':>8} {'app p99':>8}"
    )
    return [
        head,
        "-" * len(head),
        res.alone.line("alone"),
        res.attacked.line(f"{attackers} attackers"),
        res.after.line("alone again"),
        "",
        f"attacked ÷ alone: p50 {res.ratio_p50:.2f}x, p99 {res.ratio_p99:.2f}x; "
        f"attackers {res.attack_requests / res.attack_seconds:.0f} req/s; "
        f"server CPU {res.cpu_ms_per_request:.2f} ms per request; load avg {os.getloadavg()[0]:.1f}",
    ]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=15, help="length of each victim run (default 15)")
    ap.add_argument(
        "--period",
        type=float,
        action="append",
        help="seconds between the victim's loads; repeat for several rows (default 0.02 and 0.2)",
    )
    ap.add_argument("--attackers", type=int, default=16, help="attacker threads, one principal each (default 16)")
    ap.add_argument("--attacker-processes", type=int, default=2, help="processes the attackers run in (default 2)")
    ap.add_argument("--grants", type=int, default=200, help="unrelated grants in the catalog (default 200)")
    ap.add_argument("--postgres", action="store_true", help="PostgreSQL (a throwaway server) instead of SQLite")
    ap.add_argument("--server-source", metavar="DIR", help="run the server from this source tree (a baseline)")
    ap.add_argument("--runs", type=int, default=1, help="repeat the measurement on the same server (default 1)")
    ap.add_argument("--profile", metavar="FILE", help="record the attacked server with py-spy (collapsed stacks)")
    ap.add_argument(
        "--gate",
        choices=("both", "on", "off"),
        default="both",
        help="the admission gate: off and on side by side (default), or one of them",
    )
    ap.add_argument("--concurrency", type=int, help="the gate's admission.concurrency (default: the server's)")
    return ap


def summary(rows: list[tuple[str, Result]]) -> list[str]:
    """One line per (gate, victim period): the figures to compare side by side."""
    head = (
        f"{'':30} {'alone p50/p99 ms':>17} {'attacked p50/p99 ms':>20} {'p99 x':>6} {'attackers/s':>11} "
        f"{'CPU ms/req':>10}"
    )
    out = [head, "-" * len(head)]
    for label, res in rows:
        alone = f"{pct(res.alone.lat, 50):.1f}/{pct(res.alone.lat, 99):.1f}"
        attacked = f"{pct(res.attacked.lat, 50):.1f}/{pct(res.attacked.lat, 99):.1f}"
        rate = res.attack_requests / res.attack_seconds
        out.append(
            f"{label:30} {alone:>17} {attacked:>20} {res.ratio_p99:6.2f} {rate:11.0f} {res.cpu_ms_per_request:10.2f}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    periods = args.period or [0.02, 0.2]
    modes = [False, True] if args.gate == "both" and not args.server_source else [args.gate != "off"]
    rows: list[tuple[str, Result]] = []
    ok = True
    print(
        f"lakesession serve ({'PostgreSQL' if args.postgres else 'SQLite'}, {args.server_source or 'this checkout'}), "
        f"victim every {', '.join(f'{p * 1000:.0f}' for p in periods)} ms for {args.seconds:.0f} s, "
        f"{args.attackers} attackers in {args.attacker_processes} processes, {args.grants} other grants; "
        f"{os.cpu_count()} CPUs; load avg {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    for gate in modes:
        with tempfile.TemporaryDirectory(prefix="lakesession-attack-") as tmp:
            stack = Stack(Path(tmp), args, gate=gate)
            try:
                for period in periods:
                    for run in range(args.runs):
                        res = measure(
                            stack.served.uri,
                            stack.victim,
                            stack.tokens,
                            args.seconds,
                            period,
                            args.attacker_processes,
                            stack.served.proc.pid,
                            args.profile,
                        )
                        where = "as built" if args.server_source else f"gate {'on' if gate else 'off'}"
                        label = f"{where}, every {period * 1000:.0f} ms"
                        label += f" (run {run + 1})" if args.runs > 1 else ""
                        rows.append((label, res))
                        print(f"\n{label}:")
                        print("\n".join(report(res, args.attackers)))
                        p99 = pct(res.attacked.lat, 99)
                        print(
                            f"target: victim p99 under {args.attackers} attackers {p99:.1f} ms "
                            f"(<= {TARGET_P99_MS:.0f} ms): {'OK' if p99 <= TARGET_P99_MS else 'OVER TARGET'}",
                            flush=True,
                        )
                        if res.errors:
                            print("errors:", res.errors[:5])
                            ok = False
            finally:
                stack.close()
    print()
    print("\n".join(summary(rows)))
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
