"""CPU-seconds and wall time of the embedded catalog's start, each in a fresh Python, as `lakesession.spark()`
starts it (on a thread, beside the JVM's launch): reference catalog + issuer + S3 emulator up, demo user
logged in. What the client half imports anyway (lakesession, the identity flows, the gateway, httpx) is
imported before the clock starts. One unmeasured run first makes the installation's state (schema template).

    python benchmarks/embedded_start.py [--runs 5] [--python PY] [--tree OTHER_CHECKOUT] [--storage file]

``--tree`` measures another checkout's lakesession (e.g. main before a change) with this same script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent("""
    import json, sys, time
    import lakesession, lakesession.identity, lakesession.gateway, httpx, httpcore  # the client half's own
    storage = sys.argv[1] or None
    w0, c0 = time.perf_counter(), time.process_time()
    from lakesession.embedded import start_embedded_async
    emb, identity = start_embedded_async(storage=storage).result(300)
    w1, c1 = time.perf_counter(), time.process_time()
    loaded = sorted(m for m in ("alembic", "botocore", "moto", "pyiceberg") if m in sys.modules)
    print(json.dumps({"wall": w1 - w0, "cpu": c1 - c0, "loaded": loaded}))
""")


def run(python: str, tree: str, home: str, storage: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, env.get("PYTHONPATH", "")) if p)
    env["LAKESESSION_HOME"] = home
    out = subprocess.run(  # cwd: `python -c` puts it first on sys.path
        [python, "-c", CHILD, storage], capture_output=True, text=True, timeout=600, env=env, cwd=tree
    )
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--tree", default=ROOT, help="the checkout whose lakesession to measure")
    parser.add_argument("--storage", default="", help="'file' for the file:// warehouse (default: s3-emulator)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        run(args.python, args.tree, home, args.storage)  # the installation's first start: not shown
        runs = [run(args.python, args.tree, home, args.storage) for _ in range(args.runs)]
    cpu = [r["cpu"] for r in runs]
    wall = [r["wall"] for r in runs]
    print(f"embedded start ({args.tree}, {args.storage or 's3-emulator'}), {len(runs)} fresh processes:")
    print(f"  CPU-s  median {statistics.median(cpu):.3f}  min {min(cpu):.3f}  ({', '.join(f'{c:.3f}' for c in cpu)})")
    print(f"  wall s median {statistics.median(wall):.3f}  min {min(wall):.3f}")
    print(f"  imported by the start: {', '.join(runs[-1]['loaded']) or 'none of alembic, botocore, moto, pyiceberg'}")
    print(f"  load average at the end: {os.getloadavg()[0]:.1f} (2 cores)", flush=True)


if __name__ == "__main__":
    main()
