"""The reference catalog beside Project Nessie on this machine, in one run: same tables, same client, same store.

    python benchmarks/catalog_peers.py [--requests 1000] [--clients 16] [--committers 8] [--commits 40]

Starts one S3/STS emulator process (two buckets), ``lakesession serve`` (this checkout, SQLite, vending
from that emulator) and Nessie (the ``nessie-quarkus`` runner jar the interop tests use, in-memory
version store, Java 21+), which validates the serve's own OIDC tokens (Quarkus OIDC by discovery +
JWKS), so both check the same bearer token on every request. On each catalog it creates ``bench.t``
with the same schema and ``--snapshots`` snapshots (the same REST commits), then measures, with the
clients in a separate process (they never share a server's GIL or CPU accounting):

* loadTable (``GET …/namespaces/bench/tables/t``, keep-alive client per thread): p50/p99 and req/s
  with 1 client and with ``--clients`` clients, after ``--warm-requests`` unmeasured ones (Nessie's C2
  JIT, both sides' caches) and ``--warmup`` requests per client (their connections);
* commit under contention: ``--committers`` clients appending to one table (the body pyiceberg's
  fast append sends, ``assert-ref-snapshot-id``), reloading and retrying on 409 until each lands;
  p50 of the landed commit (its retries included) and of each attempt, and landed commits/s.

Prints the figures side by side with ratio reference ÷ Nessie and the machine's 1-minute load
average beside each measurement (other work on the machine moves every figure). Targets
(issues 26 and 40): req/s ratio >= 1.5 at ``--clients`` clients, and loadTable p99 <= Nessie's.
Exit status 0 when every measurement ran (the targets are printed, not enforced).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _loadclients import append_body, pct  # noqa: E402
from catalog_load import run_elsewhere  # noqa: E402

NS, TABLE = "bench", "t"
TARGET_RATIO = 1.5  # loadTable req/s at --clients clients, reference ÷ Nessie (#40)
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "name", "type": "string", "required": False},
        {"id": 3, "name": "amount", "type": "double", "required": False},
    ],
}


@dataclass
class Peer:
    """One catalog under test: where its REST root is and the path prefix its ``/v1/config`` gave."""

    name: str
    root: str  # e.g. http://127.0.0.1:p  or  http://127.0.0.1:p/iceberg
    warehouse: str
    headers: dict[str, str]
    pid: int = 0  # the catalog's server process (CPU accounting)
    store_pid: int = 0  # the S3 emulator's
    prefix: str = ""
    figures: dict[str, float] = field(default_factory=dict)
    loads: dict[str, float] = field(default_factory=dict)  # load average beside each figure group

    def table_path(self, table: str = TABLE) -> str:
        return f"{self.base_path}/v1/{self.prefix}/namespaces/{NS}/tables/{table}"

    @property
    def base_path(self) -> str:
        return httpx.URL(self.root).path.rstrip("/")

    @property
    def origin(self) -> str:
        u = httpx.URL(self.root)
        return f"{u.scheme}://{u.host}:{u.port}"


def load_avg() -> float:
    return os.getloadavg()[0]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_in(workdir: Path) -> int:
    """The process whose working directory is ``workdir`` (the Nessie JVM the launcher started there)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cwd").resolve() == workdir.resolve():
                return int(proc.name)
        except OSError:
            continue
    raise RuntimeError(f"no process runs in {workdir}")


def prepare(peer: Peer, snapshots: int) -> int:
    """Config (prefix), namespace, table and ``snapshots`` commits; returns the LoadTableResult size."""
    with httpx.Client(base_url=peer.origin, headers=peer.headers, timeout=60) as http:
        r = http.get(f"{peer.base_path}/v1/config", params={"warehouse": peer.warehouse})
        r.raise_for_status()
        cfg = r.json()
        peer.prefix = {**cfg.get("defaults", {}), **cfg.get("overrides", {})}.get("prefix", "")
        ns_path = f"{peer.base_path}/v1/{peer.prefix}/namespaces"
        r = http.post(ns_path, json={"namespace": [NS]})
        if r.status_code not in (200, 409):
            raise SystemExit(f"{peer.name}: create namespace: {r.status_code} {r.text[:300]}")
        r = http.post(f"{ns_path}/{NS}/tables", json={"name": TABLE, "schema": SCHEMA, "stage-create": False})
        if r.status_code != 200:
            raise SystemExit(f"{peer.name}: create table: {r.status_code} {r.text[:300]}")
        meta = r.json()["metadata"]
        for _ in range(snapshots):
            r = http.post(peer.table_path(), json=append_body(meta, 100))
            if r.status_code != 200:
                raise SystemExit(f"{peer.name}: commit: {r.status_code} {r.text[:300]}")
            meta = r.json()["metadata"]
        return len(http.get(peer.table_path()).content)


def _committer(origin: str, path: str, headers: dict[str, str], commits: int, barrier: Any, out: Any) -> None:
    """One contending writer (own process, own connection): ``commits`` appends, each retried on 409."""
    try:
        _commit_loop(origin, path, headers, commits, barrier, out)
    except Exception as e:  # reported by the parent, with the catalog's name
        out.send({"error": f"{type(e).__name__}: {e}"})


def _metadata(r: httpx.Response) -> dict[str, Any]:
    if r.status_code != 200:
        raise RuntimeError(f"{r.request.method} {r.status_code}: {r.text[:300]}")
    return dict(r.json()["metadata"])


def _commit_loop(origin: str, path: str, headers: dict[str, str], commits: int, barrier: Any, out: Any) -> None:
    landed: list[float] = []
    attempts: list[float] = []
    conflicts = 0
    with httpx.Client(base_url=origin, headers=headers, timeout=60) as http:
        meta = _metadata(http.get(path))
        barrier.wait()
        t_start = time.perf_counter()
        for _ in range(commits):
            t0 = time.perf_counter()
            delay = 0.01
            while True:
                a0 = time.perf_counter()
                r = http.post(path, json=append_body(meta, 1))
                attempts.append(time.perf_counter() - a0)
                if r.status_code == 200:
                    meta = _metadata(r)
                    break
                if r.status_code != 409:
                    out.send({"error": f"commit {r.status_code} {r.text[:300]}"})
                    return
                conflicts += 1
                time.sleep(delay * random.random())  # jittered backoff, then reload, as Iceberg clients do
                delay = min(delay * 2, 0.2)
                meta = _metadata(http.get(path))
            landed.append(time.perf_counter() - t0)
        wall = time.perf_counter() - t_start
    out.send({"landed": landed, "attempts": attempts, "conflicts": conflicts, "wall": wall})


def contended_commits(peer: Peer, committers: int, commits: int) -> dict[str, float]:
    """``committers`` processes appending to one table at once (after the load runs)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(committers)
    pipes, procs = [], []
    for _ in range(committers):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_committer, args=(peer.origin, peer.table_path(), peer.headers, commits, barrier, send))
        p.start()
        send.close()
        pipes.append(recv)
        procs.append(p)
    results = [r.recv() for r in pipes]
    for p in procs:
        p.join(30)
    for res in results:
        if "error" in res:
            raise SystemExit(f"{peer.name}: {res['error']}")
    landed = [x for r in results for x in r["landed"]]
    attempts = [x for r in results for x in r["attempts"]]
    wall = max(r["wall"] for r in results)
    return {
        "commit_p50": pct(landed, 50),
        "commit_p99": pct(landed, 99),
        "attempt_p50": pct(attempts, 50),
        "commits_per_s": len(landed) / wall,
        "conflicts_per_commit": sum(r["conflicts"] for r in results) / len(landed),
    }


def measure(peer: Peer, args: argparse.Namespace) -> None:
    path = peer.table_path()
    if args.warm_requests:  # unmeasured: JIT compilation (C2) and every cache on both sides
        run_elsewhere(peer.origin, path, peer.headers, args.clients, max(1, args.warm_requests // args.clients), 0)
    cpu0, store0, n = cpu_seconds(peer.pid), cpu_seconds(peer.store_pid), 0
    for clients, per_client in ((1, args.requests), (args.clients, args.per_client or max(1, args.requests // 5))):
        lat, wall = run_elsewhere(peer.origin, path, peer.headers, clients, per_client, args.warmup)
        n += len(lat) + clients * args.warmup
        peer.figures[f"p50_{clients}"] = pct(lat, 50)
        peer.figures[f"p99_{clients}"] = pct(lat, 99)
        peer.figures[f"rps_{clients}"] = len(lat) / wall
        peer.loads[f"load_{clients}"] = load_avg()
    peer.figures["cpu_per_load"] = (cpu_seconds(peer.pid) - cpu0) / n * 1000
    peer.figures["store_cpu_per_load"] = (cpu_seconds(peer.store_pid) - store0) / n * 1000
    cpu0, store0 = cpu_seconds(peer.pid), cpu_seconds(peer.store_pid)
    peer.figures.update(contended_commits(peer, args.committers, args.commits))
    landed = args.committers * args.commits
    peer.figures["cpu_per_commit"] = (cpu_seconds(peer.pid) - cpu0) / landed * 1000
    peer.figures["store_cpu_per_commit"] = (cpu_seconds(peer.store_pid) - store0) / landed * 1000
    peer.loads["commit"] = load_avg()


class Stack:
    """The emulator, ``lakesession serve`` and Nessie, each its own process; stopped in reverse order."""

    def __init__(self, tmp: Path):
        from tests._nessie import SERVER_JVM_OPTIONS, java_for_nessie, nessie, nessie_properties
        from tests._serve import Served
        from tests.support import java_major

        self._stack: list[Any] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.store = subprocess.Popen(
            [sys.executable, "-m", "lakesession.reference.storage.emulator", "peers-ref", "peers-nessie"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**env, "PYTHONPATH": str(ROOT)},
        )
        s3 = json.loads(self.store.stdout.readline())  # type: ignore[union-attr]
        keys = {"AWS_ACCESS_KEY_ID": s3["access_key_id"], "AWS_SECRET_ACCESS_KEY": s3["secret_access_key"]}
        self.served = Served(
            [
                *("--port", "0", "--data-dir", str(tmp / "served"), "--warehouse", "s3://peers-ref/wh"),
                *("--s3-role-arn", s3["role_arn"], "--s3-endpoint", s3["endpoint"], "--s3-region", s3["region"]),
            ],
            env=keys,
        )
        props = nessie_properties(
            issuer=self.served.lines["issuer"],
            audience="lakesession",
            s3_endpoint=s3["endpoint"],
            region=s3["region"],
            bucket="peers-nessie",
            access_key=s3["access_key_id"],
            secret_key=s3["secret_access_key"],
            role_arn=s3["role_arn"],
            credential_ttl=900,
        )
        props["quarkus.log.console.level"] = "WARN"
        # no access delegation asked, no vending on either side: Nessie 0.99 would still assume a role per load
        # and then refuses its own cached STS credential once it has less than the session duration left
        props["nessie.catalog.service.s3.default-options.client-iam.enabled"] = "false"
        self.jvm = f"Java {java_major(java_for_nessie())} {' '.join(SERVER_JVM_OPTIONS)}"
        self._nessie_cm = nessie(tmp / "nessie", props, timeout=300, jvm_options=SERVER_JVM_OPTIONS)
        self.nessie = self._nessie_cm.__enter__()
        self.nessie_pid = pid_in(tmp / "nessie")

    def close(self) -> None:
        try:
            self._nessie_cm.__exit__(None, None, None)
        finally:
            self.served.stop()
            self.store.stdin.close()  # type: ignore[union-attr]
            self.store.wait(timeout=30)


def table(ref: Peer, nessie: Peer, args: argparse.Namespace) -> list[str]:
    """The side-by-side lines: figure, reference, Nessie, ratio reference ÷ Nessie, load average."""
    rows: list[tuple[str, str, str, bool]] = []  # label, key, load key, higher is better
    for c in (1, args.clients):
        who = f"{c} client{'s' if c > 1 else ''}"
        rows += [
            (f"loadTable p50 ms, {who}", f"p50_{c}", f"load_{c}", False),
            (f"loadTable p99 ms, {who}", f"p99_{c}", f"load_{c}", False),
            (f"loadTable req/s, {who}", f"rps_{c}", f"load_{c}", True),
        ]
    w = args.committers
    rows += [
        (f"commit p50 ms, {w} writers one table", "commit_p50", "commit", False),
        (f"commit p99 ms, {w} writers one table", "commit_p99", "commit", False),
        (f"commit attempt p50 ms, {w} writers", "attempt_p50", "commit", False),
        (f"commits landed/s, {w} writers", "commits_per_s", "commit", True),
        (f"409s per landed commit, {w} writers", "conflicts_per_commit", "commit", False),
        ("catalog CPU ms per loadTable", "cpu_per_load", f"load_{args.clients}", False),
        ("S3 store CPU ms per loadTable", "store_cpu_per_load", f"load_{args.clients}", False),
        ("catalog CPU ms per landed commit", "cpu_per_commit", "commit", False),
        ("S3 store CPU ms per landed commit", "store_cpu_per_commit", "commit", False),
    ]
    head = f"{'':40} {'reference':>10} {'Nessie':>10} {'ref÷Nessie':>11}   load avg (ref / Nessie)"
    out = [head, "-" * len(head)]
    for label, key, load_key, higher in rows:
        a, b = ref.figures[key], nessie.figures[key]
        ratio = f"{a / b:.2f}" if b else "-"
        better = "higher is better" if higher else "lower is better"
        out.append(
            f"{label:40} {a:10.2f} {b:10.2f} {ratio:>11}   {ref.loads[load_key]:.1f} / {nessie.loads[load_key]:.1f}"
            f"   ({better})"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000, help="single-client loadTable requests (default 1000)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent loadTable clients (default 16)")
    ap.add_argument("--per-client", type=int, default=None, help="requests per concurrent client (default requests/5)")
    ap.add_argument("--warmup", type=int, default=200, help="warm-up requests per client (default 200)")
    ap.add_argument(
        "--warm-requests", type=int, default=4000, help="unmeasured loadTable requests first (default 4000)"
    )
    ap.add_argument("--snapshots", type=int, default=5, help="snapshots in the benchmark table (default 5)")
    ap.add_argument("--committers", type=int, default=8, help="concurrent writers of one table (default 8)")
    ap.add_argument("--commits", type=int, default=40, help="commits landed per writer (default 40)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="lakesession-peers-") as tmp:
        started = time.monotonic()
        stack = Stack(Path(tmp))
        try:
            token = stack.served.admin_token()
            auth = {"Authorization": f"Bearer {token}"}
            ref = Peer("reference", stack.served.uri, stack.served.lines["warehouse"], auth, stack.served.proc.pid)
            nes = Peer("Nessie", stack.nessie.iceberg_uri, "warehouse", auth, stack.nessie_pid)
            ref.store_pid = nes.store_pid = stack.store.pid
            sizes = {p.name: prepare(p, args.snapshots) for p in (ref, nes)}
            print(
                f"reference catalog: lakesession serve (1 worker, SQLite) at {ref.root}; Nessie at {nes.root} "
                f"(in-memory version store, no authorization rules, {stack.jvm}); one S3/STS emulator process; clients in separate processes; "
                f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; stack up in {time.monotonic() - started:.0f} s",
                flush=True,
            )
            print(
                f"table {NS}.{TABLE}: {args.snapshots} snapshots; LoadTableResult {sizes['reference']} bytes (reference), "
                f"{sizes['Nessie']} bytes (Nessie); same bearer token (the serve's issuer) on both",
                flush=True,
            )
            for peer in (ref, nes):  # one after the other: neither competes with the other for the 2 cores
                measure(peer, args)
        finally:
            stack.close()
    print()
    print("\n".join(table(ref, nes, args)))
    c = args.clients
    rps_ratio = ref.figures[f"rps_{c}"] / nes.figures[f"rps_{c}"]
    p99_ok = ref.figures[f"p99_{c}"] <= nes.figures[f"p99_{c}"]
    print()
    print(
        f"targets: req/s ratio at {c} clients {rps_ratio:.2f} (>= {TARGET_RATIO}): "
        f"{'OK' if rps_ratio >= TARGET_RATIO else 'UNDER TARGET'}; "
        f"loadTable p99 at {c} clients {ref.figures[f'p99_{c}']:.2f} vs {nes.figures[f'p99_{c}']:.2f} ms (<= Nessie's): "
        f"{'OK' if p99_ok else 'OVER TARGET'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
