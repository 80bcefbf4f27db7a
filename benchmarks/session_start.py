"""Cold start: `lakesession.spark()` to first query vs plain `SparkSession.builder` with the same jars.

Each measurement runs in a fresh Python process (a cold JVM), alternating the
two variants so machine noise hits both alike. Prints each run, the medians
and the ratio lakesession / plain (target <= 1.15).

    python benchmarks/session_start.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap

COMMON = """
import json, os, sys, time
t0 = time.perf_counter()
"""

PLAIN = COMMON + textwrap.dedent("""
    from pyspark.sql import SparkSession
    from lakesession._spark.jars import resolve_jars
    jars = resolve_jars("cache")
    b = (SparkSession.builder.master("local[*]").appName("plain")
         .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.ui.showConsoleProgress", "false"))
    for k, v in jars.spark_conf().items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sql("SELECT 1").collect()
    t1 = time.perf_counter()
    spark.sql("SHOW NAMESPACES").collect()
    t2 = time.perf_counter()
    print(json.dumps({"first_query": t1 - t0, "catalog_query": t2 - t1}))
""")

LAKESESSION = COMMON + textwrap.dedent("""
    import lakesession
    spark = lakesession.spark(data_dir=sys.argv[1], jars="cache")
    spark.sql("SELECT 1").collect()
    t1 = time.perf_counter()
    spark.sql("SHOW NAMESPACES IN lake").collect()
    t2 = time.perf_counter()
    print(json.dumps({"first_query": t1 - t0, "catalog_query": t2 - t1}))
""")


def run(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from lakesession._spark.jars import resolve_jars

    resolve_jars()  # make sure the jar cache exists before timing anything
    plain, lake = [], []
    with tempfile.TemporaryDirectory() as data:
        run(LAKESESSION, data)  # first run creates the embedded state; not timed
        for i in range(args.runs):
            p = run(PLAIN)
            lk = run(LAKESESSION, data)
            plain.append(p)
            lake.append(lk)
            print(
                f"run {i + 1}: plain {p['first_query']:.2f}s  lakesession {lk['first_query']:.2f}s  "
                f"(first catalog query: plain {p['catalog_query']:.2f}s, lakesession {lk['catalog_query']:.2f}s)"
            )
    mp = statistics.median(r["first_query"] for r in plain)
    ml = statistics.median(r["first_query"] for r in lake)
    print(f"median cold start to first query: plain SparkSession.builder {mp:.2f}s, lakesession.spark() {ml:.2f}s")
    print(f"ratio lakesession/plain = {ml / mp:.3f} (target <= 1.15)")


if __name__ == "__main__":
    main()
