"""Comet's native scan vs Spark's JVM scan on a lineitem-like Iceberg table in the S3 emulator.

    python benchmarks/comet_scan.py                # 10 M rows (generated with Spark, once per run)
    python benchmarks/comet_scan.py --rows 200000  # smoke run

One SparkContext with ``comet=True``; each query (TPC-H q1 and q6 shapes) runs alternately with
``spark.comet.enabled`` on and off in the same session (warm-up first, then the median of
``--repeat`` runs). Prints wall times, the ratio Comet ÷ Spark JVM, and how often Comet asked
lakesession's credential provider per query (one table; default credential lifetime, 1 h).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lakesession
from lakesession.reference import bootstrap, start

POLICY = """
principals:
  - {name: analyst, type: user, client_id: analyst, client_secret: analyst-bench-123}
roles:
  - {name: r, members: [analyst]}
grants:
  - {role: r, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""
TABLE = "lake.tpch.lineitem"
Q1 = f"""
SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
       avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price, avg(l_discount) AS avg_disc,
       count(*) AS count_order
FROM {TABLE} WHERE l_shipdate <= date '1998-09-02'
GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus
"""
Q6 = f"""
SELECT sum(l_extendedprice * l_discount) AS revenue FROM {TABLE}
WHERE l_shipdate >= date '1994-01-01' AND l_shipdate < date '1995-01-01'
  AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24
"""


def generate(spark: Any, rows: int) -> None:
    """lineitem's scanned columns, with TPC-H-like value ranges (deterministic hashes of the row id)."""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.tpch")
    spark.sql(f"""
        CREATE TABLE {TABLE} USING iceberg AS
        SELECT id AS l_orderkey,
               CAST(1 + pmod(hash(id, 1), 50) AS DECIMAL(15, 2)) AS l_quantity,
               CAST(900 + pmod(hash(id, 2), 100000) / 1.0 AS DECIMAL(15, 2)) AS l_extendedprice,
               CAST(pmod(hash(id, 3), 11) / 100.0 AS DECIMAL(15, 2)) AS l_discount,
               CAST(pmod(hash(id, 4), 9) / 100.0 AS DECIMAL(15, 2)) AS l_tax,
               element_at(array('A', 'N', 'R'), 1 + pmod(hash(id, 5), 3)) AS l_returnflag,
               element_at(array('F', 'O'), 1 + pmod(hash(id, 6), 2)) AS l_linestatus,
               date_add(date '1992-01-02', pmod(hash(id, 7), 2526)) AS l_shipdate
        FROM range({rows})
    """)


def timed(spark: Any, sql: str, comet: bool) -> tuple[float, list[Any], str]:
    spark.conf.set("spark.comet.enabled", "true" if comet else "false")
    df = spark.sql(sql)
    start_at = time.perf_counter()
    rows = df.collect()
    took = time.perf_counter() - start_at
    return took, rows, str(df._jdf.queryExecution().executedPlan().toString())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    for var in [k for k in os.environ if k.startswith("AWS_")]:
        os.environ.pop(var)
    with tempfile.TemporaryDirectory(prefix="comet-bench-") as data:
        handle = start(warehouse="s3://bench/wh", s3_emulator=True, data_dir=data, bootstrap=bootstrap.parse(POLICY))
        session = lakesession.connect(
            uri=handle.uri,
            credential="analyst:analyst-bench-123",
            token_url=f"{handle.issuer_uri}/token",
            warehouse=handle.warehouse,
            master="local[2]",
            spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
            comet=True,
        )
        try:
            spark = session.spark()
            t0 = time.perf_counter()
            generate(spark, args.rows)
            print(f"generated {args.rows:,} rows in {time.perf_counter() - t0:.1f} s", flush=True)
            provider = spark._jvm.dev.lakesession.jvm.CometCredentialProvider
            ratios = []
            for name, sql in (("q1", Q1), ("q6", Q6)):
                times: dict[bool, list[float]] = {True: [], False: []}
                results: dict[bool, Any] = {}
                calls = []
                for i in range(args.repeat + 1):  # the first round warms both up and is not counted
                    for comet in (True, False):
                        before = provider.providerCalls()
                        took, rows, plan = timed(spark, sql, comet)
                        if comet:
                            assert "CometIcebergNativeScan" in plan, plan
                            calls.append(provider.providerCalls() - before)
                        else:
                            assert "Comet" not in plan, plan
                        results[comet] = rows
                        if i:
                            times[comet].append(took)
                assert results[True] == results[False] or (name == "q1" and _close(results[True], results[False]))
                comet_s, jvm_s = statistics.median(times[True]), statistics.median(times[False])
                ratios.append(comet_s / jvm_s)
                print(
                    f"{name}: Comet native {comet_s:.2f} s, Spark JVM {jvm_s:.2f} s, ratio {comet_s / jvm_s:.2f} "
                    f"(target <= 0.7); provider calls per query per table: {statistics.median(calls):g} "
                    f"(max {max(calls)}, target <= 2)",
                    flush=True,
                )
            print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
            print(f"geometric mean ratio: {statistics.geometric_mean(ratios):.2f}")
        finally:
            session.close()
            handle.stop()
    return 0


def _close(a: list[Any], b: list[Any]) -> bool:
    """q1's averages may differ in the last digits between the engines."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b, strict=True):
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, str) or x is None:
                if x != y:
                    return False
            elif abs(float(x) - float(y)) > 1e-6 * max(1.0, abs(float(y))):
                return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
