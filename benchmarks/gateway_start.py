"""Client-path start-up: ``import lakesession``, then starting the gateway and its first answer.

Each run is a fresh Python process. Prints medians of wall time and of CPU time (user + sys,
less sensitive to a busy machine), the number of modules loaded, and whether FastAPI was.
Pass several trees (e.g. a checkout of an older commit) to compare them, alternating runs.

    python benchmarks/gateway_start.py [--runs 9] [--tree PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CODE = """
import json, resource, socket, sys, time, urllib.request
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
w0, c0 = time.perf_counter(), cpu()
import lakesession
w1, c1 = time.perf_counter(), cpu()
modules = len(sys.modules)
from lakesession.gateway import Gateway
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
w2, c2 = time.perf_counter(), cpu()
g = Gateway(f"http://127.0.0.1:{port}", lambda: "t", timeout=1).start()
w3, c3 = time.perf_counter(), cpu()
time.sleep(1.0)  # the JVM launches meanwhile
w4 = time.perf_counter()
req = urllib.request.Request(g.uri + "/v1/config", headers={"Authorization": "Bearer " + g.secret})
try:
    urllib.request.urlopen(req)
except Exception:
    pass
w5, c5 = time.perf_counter(), cpu()
g.stop()
print(json.dumps({
    "import_ms": (w1 - w0) * 1000, "import_cpu_ms": (c1 - c0) * 1000, "modules": modules,
    "gateway_start_ms": (w3 - w2) * 1000, "gateway_cpu_ms": (c5 - c2) * 1000,
    "first_answer_ms": (w5 - w4) * 1000, "fastapi": "fastapi" in sys.modules,
}))
"""

KEYS = ("import_ms", "import_cpu_ms", "gateway_start_ms", "gateway_cpu_ms", "first_answer_ms")


def run(tree: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CODE], cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--tree", action="append", type=Path, help="a source tree holding lakesession/")
    args = parser.parse_args()
    trees = args.tree or [Path(__file__).resolve().parents[1]]
    results: dict[Path, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(args.runs):
        for tree in trees:
            results[tree].append(run(tree))
    for tree, rows in results.items():
        medians = {k: round(statistics.median(r[k] for r in rows), 1) for k in KEYS}
        print(json.dumps({"tree": str(tree), **medians, "modules": rows[0]["modules"], "fastapi": rows[0]["fastapi"]}))


if __name__ == "__main__":
    main()
