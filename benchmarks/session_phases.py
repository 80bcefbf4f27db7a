"""Where `lakesession.spark()`'s cold start goes: phase timestamps up to the first query, per Spark line.

A companion to ``session_start.py`` (which gives the ratio): each run is a fresh Python (a cold
JVM) on the embedded default, with lakesession's own steps wrapped to note when they happen —
gateway up, JVM launched, embedded catalog start begun and ready (catalog up, demo user logged
in), the JVM's first ``GET /v1/config`` at the gateway and its answer, ``SELECT 1`` done. The
``/v1/config`` wait is how long the first query stood waiting for the catalog: on Spark 3.5 the
first query loads the default catalog, on Spark 4 it does not (``_sparkbind.first_query_loads_catalog``).

    python benchmarks/session_phases.py [--runs 1] [--python /path/to/venv/bin/python ...]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from session_start import env, pythons  # a sibling script, not a package

CHILD = textwrap.dedent("""
    import json, sys, threading, time
    t0 = time.perf_counter()
    marks, cpu = {}, {}

    def mark(name):
        marks.setdefault(name, round(time.perf_counter() - t0, 3))
        cpu.setdefault(name, round(time.process_time(), 3))  # this Python's CPU-s by then (the JVM is another process)

    def around(owner, attr, before=None, after=None, when=lambda *a, **k: True):
        original = getattr(owner, attr)

        def wrapped(*args, **kwargs):
            hit = when(*args, **kwargs)
            if before and hit:
                mark(before)
            result = original(*args, **kwargs)
            if after and hit:
                mark(after)
            return result

        setattr(owner, attr, wrapped)

    import lakesession
    mark("import lakesession")
    from lakesession import _sparkbind
    from lakesession._spark import session as spark_session
    from lakesession.embedded import EmbeddedStart
    from lakesession.gateway import Gateway
    from lakesession.gateway._app import GatewayApp
    from lakesession.gateway._upstream import Upstream

    config = lambda self, method, path, *a, **k: path.rstrip("/").endswith("/v1/config")
    around(Gateway, "start", after="gateway up")
    around(_sparkbind, "bind", before="JVM launch begins")
    around(spark_session, "build_spark", after="JVM launched")
    around(EmbeddedStart, "_target", before="embedded start begins", after="embedded ready")
    around(GatewayApp, "_early", before="first /v1/config arrives", when=config)
    around(Upstream, "forward", after="first /v1/config answered", when=config)
    spark = lakesession.spark(data_dir=sys.argv[1], jars="cache")
    mark("spark() returned")
    spark.sql("SELECT 1").collect()
    mark("SELECT 1 done")
    spark.sql("SHOW NAMESPACES IN lake").collect()
    mark("SHOW NAMESPACES done")
    print(json.dumps({"marks": marks, "cpu": cpu}))
""")


def run(python: str, data: str) -> dict[str, float]:
    out = subprocess.run([python, "-c", CHILD, data], capture_output=True, text=True, timeout=600, env=env())
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--python", action="append", default=[], help="a Python whose pyspark to measure")
    args = parser.parse_args()
    for python, version in pythons(args.python):
        with tempfile.TemporaryDirectory() as data:
            run(python, data)  # the first run creates the embedded state; not shown
            both = [run(python, data) for _ in range(args.runs)]
        runs, cpus = [b["marks"] for b in both], [b["cpu"] for b in both]
        names = sorted({n for r in runs for n in r}, key=lambda n: statistics.median(r[n] for r in runs if n in r))
        print(f"Spark {version} ({python}), median of {len(runs)} cold run(s), seconds since the script began")
        print("  (and the Python process's CPU-s by then):")
        for name in names:
            at = statistics.median(r[name] for r in runs if name in r)
            print(f"  {at:7.3f}  ({statistics.median(c[name] for c in cpus if name in c):6.3f} CPU-s)  {name}")
        waits = [
            r["first /v1/config answered"] - r["first /v1/config arrives"]
            for r in runs
            if "first /v1/config arrives" in r
        ]
        if waits:
            print(f"  first /v1/config waited {statistics.median(waits):.3f} s at the gateway")
        print(f"  load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)", flush=True)


if __name__ == "__main__":
    main()
