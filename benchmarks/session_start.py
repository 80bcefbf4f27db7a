"""Cold start: `lakesession.spark()` to first query vs plain `SparkSession.builder` with the same jars.

Each measurement runs in a fresh Python process (a cold JVM), alternating the
variants so machine noise hits them alike. Prints each run, the medians
and the ratio lakesession / plain (target <= 1.10), per installed Spark major.
lakesession's start-up warm-ups (``_spark/_plan.WARMUPS``) are guarded here, not in docstrings: a
third variant turns the ``classcache`` warm-up off (the class-data-sharing archive of the JVM's
classes, written by the first, untimed run), a fourth turns every warm-up off
(``LAKESESSION_WARMUPS=none``); each is printed as a ratio against plain, so a warm-up that stops
paying shows as its ratio nearing lakesession's own. The first catalog query after the start (``SHOW NAMESPACES
IN lake``) is timed too, against plain Spark querying the *same* catalog: the embedded reference catalog of the
same data directory, already serving (started, warmed and asked once before plain's clock starts), configured
as Iceberg's ``rest`` catalog with the demo user's token (target <= 1.5x plain and <= 0.3 s). One Python per Spark line (``--python``, repeatable; default this interpreter and
any of /work/venvs/*/bin/python or ``$LAKESESSION_BENCH_PYTHONS`` (os.pathsep-separated)
whose pyspark is another major).

    python benchmarks/session_start.py [--runs 3] [--python /path/to/venv/bin/python ...] [--quick]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

COMMON = """
import json, os, sys, time
t0 = time.perf_counter()
"""

# plain Spark against the same catalog lakesession uses: the embedded reference catalog of this data
# directory, started, warmed and serving before the clock starts (like a long-running catalog), reached
# directly as Iceberg's ``rest`` catalog with the demo user's token (no gateway), as the default catalog
PLAIN = textwrap.dedent("""
    import json, sys, time
    import httpx
    from lakesession import embedded
    emb = embedded.start_embedded(sys.argv[1])
    emb.handle.warm()
    token = embedded.demo_identity(emb).token()
    auth = {"Authorization": "Bearer " + token}
    config = httpx.get(emb.uri + "/v1/config", params={"warehouse": emb.warehouse}, headers=auth).json()
    prefix = config["overrides"]["prefix"]
    httpx.get(emb.uri + "/v1/" + prefix + "/namespaces", headers=auth).raise_for_status()
    t0 = time.perf_counter()
    from pyspark.sql import SparkSession
    from lakesession._spark.jars import resolve_jars
    jars = resolve_jars("cache")
    lake = "spark.sql.catalog.lake"
    b = (SparkSession.builder.master("local[*]").appName("plain")
         .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.defaultCatalog", "lake")
         .config(lake, "org.apache.iceberg.spark.SparkCatalog")
         .config(lake + ".type", "rest")
         .config(lake + ".uri", emb.uri)
         .config(lake + ".token", token)
         .config(lake + ".warehouse", emb.warehouse)
         .config(lake + ".cache-enabled", "false")
         .config(lake + ".header.X-Iceberg-Access-Delegation", "vended-credentials"))
    for k, v in jars.spark_conf().items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sql("SELECT 1").collect()
    t1 = time.perf_counter()
    spark.sql("SHOW NAMESPACES IN lake").collect()
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


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 1.10
CATALOG_TARGET, CATALOG_TARGET_S = 1.5, 0.3  # first catalog query: x plain, and seconds (issue #33)


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    e["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, e.get("PYTHONPATH", "")) if p)
    return {**e, **extra}


def run(python: str, code: str, *args: str, **extra_env: str) -> dict[str, float]:
    out = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=600, env=env(**extra_env))
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def spark_version(python: str) -> str | None:
    out = subprocess.run(
        [python, "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True, text=True, env=env()
    )
    return out.stdout.strip() if out.returncode == 0 else None


def pythons(explicit: list[str]) -> list[tuple[str, str]]:
    """(python, pyspark version) pairs: the explicit ones, else this one plus one per other Spark major found."""
    found: list[tuple[str, str]] = []
    candidates = explicit or [
        sys.executable,
        *filter(None, os.environ.get("LAKESESSION_BENCH_PYTHONS", "").split(os.pathsep)),
        *sorted(glob.glob("/work/venvs/*/bin/python")),
    ]
    majors: set[str] = set()
    for py in candidates:
        version = spark_version(py)
        if version and (explicit or version.split(".")[0] not in majors):
            majors.add(version.split(".")[0])
            found.append((py, version))
    return found


SETTLE = "from lakesession._spark import _classcache, jars; _classcache.settle(jars.cache_dir()); print('{}')"


def measure(python: str, version: str, runs: int, quick: bool = False) -> tuple[float, float, float]:
    """(lakesession / plain, without its class cache / plain, without any warm-up / plain), medians of ``runs``.

    ``quick`` (the suite's smoke run) skips the untimed runs that make sure the class archive exists first:
    its figures then hold whatever archive the machine has (the test suite's earlier JVMs wrote one)."""
    run(python, "from lakesession._spark.jars import resolve_jars; resolve_jars(); print('{}')")  # jars cached first
    plain, lake, bare, cold = [], [], [], []
    with tempfile.TemporaryDirectory() as data:
        if not quick:
            run(python, LAKESESSION, data)  # creates the embedded state (and the class archive, if none); not timed
            run(python, SETTLE)  # until that JVM has written the archive at exit
            run(python, LAKESESSION, data)  # proves and promotes the archive; not timed
        for i in range(runs):
            p = run(python, PLAIN, data)
            lk = run(python, LAKESESSION, data)
            b = run(python, LAKESESSION, data, LAKESESSION_WARMUPS="catalog,embedded")
            c = run(python, LAKESESSION, data, LAKESESSION_WARMUPS="none")
            plain.append(p)
            lake.append(lk)
            bare.append(b)
            cold.append(c)
            print(
                f"Spark {version} run {i + 1}: plain {p['first_query']:.2f}s  lakesession {lk['first_query']:.2f}s  "
                f"(class cache off {b['first_query']:.2f}s, warm-ups off {c['first_query']:.2f}s; first catalog "
                f"query: plain {p['catalog_query']:.2f}s, lakesession {lk['catalog_query']:.2f}s, warm-ups off "
                f"{c['catalog_query']:.2f}s)",
                flush=True,
            )
    mp, ml, mb, mc = (statistics.median(r["first_query"] for r in rs) for rs in (plain, lake, bare, cold))
    print(
        f"Spark {version}: median cold start to first query: plain SparkSession.builder {mp:.2f}s, "
        f"lakesession.spark() {ml:.2f}s, with its class cache off {mb:.2f}s, with every warm-up off {mc:.2f}s"
    )
    qp, ql, qc = (statistics.median(r["catalog_query"] for r in rs) for rs in (plain, lake, cold))
    print(
        f"Spark {version}: median first catalog query: plain {qp:.2f}s, lakesession {ql:.2f}s "
        f"(ratio {ql / qp:.2f}, target <= {CATALOG_TARGET:.1f} and <= {CATALOG_TARGET_S:.1f}s), "
        f"warm-ups off {qc:.2f}s (ratio {qc / qp:.2f})"
    )
    return ml / mp, mb / mp, mc / mp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", action="append", default=[], help="a Python whose pyspark to measure")
    parser.add_argument("--quick", action="store_true", help="no untimed runs first (the suite's smoke run)")
    args = parser.parse_args()
    ratios = [(version, measure(py, version, args.runs, args.quick)) for py, version in pythons(args.python)]
    for version, (ratio, bare, cold) in ratios:
        print(
            f"Spark {version}: ratio lakesession/plain = {ratio:.3f} (target <= {TARGET:.2f}); "
            f"class cache off: {bare:.3f}; warm-ups off: {cold:.3f} (ratio warm-ups on/off = {ratio / cold:.3f})"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
