"""``lakesession demo``: the whole path on the embedded default, narrated.

Creates a namespace and tables, writes and reads with Spark, reads with
pyiceberg, and prints what the session accessed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO


class _Narrator:
    def __init__(self, out: TextIO):
        self.out = out
        self.t0 = time.monotonic()

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", file=self.out, flush=True)

    def block(self, text: str) -> None:
        for line in text.rstrip().splitlines():
            print(f"          {line}", file=self.out)
        self.out.flush()


def run_demo(
    *,
    data_dir: Path | None = None,
    out: TextIO = sys.stdout,
    jars: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the demo; returns what it observed (for tests)."""
    import lakesession

    say = _Narrator(out)
    say.step("starting the embedded catalog and logging in the demo user")
    session = lakesession.connect(data_dir=data_dir, jars=jars)
    session.identity.token()  # log in now, so the principal is known
    who = session.identity.describe() if hasattr(session.identity, "describe") else {}
    say.step(f"catalog {session.uri} · issuer {session.embedded.issuer} · principal {who.get('principal', '?')}")
    say.step("starting Spark (the JVM talks to a loopback gateway; your token never enters it)")
    spark = session.spark()
    say.step(f"Spark {spark.version} ready; catalog 'lake' → gateway {session.gateway.uri}")

    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.demo")
    spark.sql("DROP TABLE IF EXISTS lake.demo.orders")
    spark.sql("DROP TABLE IF EXISTS lake.demo.customers")
    spark.sql("CREATE TABLE lake.demo.customers (id BIGINT, name STRING, country STRING) USING iceberg")
    spark.sql(
        "CREATE TABLE lake.demo.orders (id BIGINT, customer_id BIGINT, amount DOUBLE, note STRING) "
        "USING iceberg PARTITIONED BY (customer_id)"
    )
    say.step("created namespace demo and tables demo.customers, demo.orders")
    spark.sql("INSERT INTO lake.demo.customers VALUES (1, 'Ada', 'UK'), (2, 'Grace', 'US'), (3, 'Linus', 'FI')")
    spark.sql(
        "INSERT INTO lake.demo.orders VALUES (10, 1, 12.5, 'first'), (11, 1, 30.0, NULL), "
        "(12, 2, 99.9, 'rush'), (13, 3, 5.0, NULL)"
    )
    spark.sql("UPDATE lake.demo.orders SET amount = amount * 2 WHERE customer_id = 3")
    say.step("wrote rows with Spark (INSERT, UPDATE)")

    report: Any = spark.sql(
        "SELECT c.name, count(*) AS orders, round(sum(o.amount), 2) AS total "
        "FROM lake.demo.orders o JOIN lake.demo.customers c ON o.customer_id = c.id "
        "GROUP BY c.name ORDER BY c.name"
    ).toPandas()
    say.step("read with Spark: orders per customer")
    say.block(report.to_string(index=False))

    table: Any = session.table("demo.orders")  # a pyiceberg Table (a view would give a DataFrame)
    orders = table.scan().to_pandas().sort_values("id")
    say.step(f"read with pyiceberg: {len(orders)} orders, notes {orders['note'].tolist()}")

    accesses = session.accesses()
    summary = (
        accesses.groupby(["object", "action", "status"], as_index=False)
        .agg(calls=("count", "sum"), p50_ms=("duration_ms", "median"))
        .sort_values(["object", "action", "status"])
    )
    say.step(f"what this session accessed through the gateway ({int(accesses['count'].sum())} catalog calls):")
    say.block(summary.to_string(index=False))
    return {"report": report, "orders": orders, "accesses": accesses, "session": session}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="lakesession demo", description=__doc__)
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="embedded catalog state (default: LAKESESSION_HOME)"
    )
    parser.add_argument("--jars", default=None, help="jar mode: auto, offline, maven, cache")
    args = parser.parse_args(argv)
    from .errors import LakesessionError

    try:
        result = run_demo(data_dir=args.data_dir, jars=args.jars)
    except LakesessionError as e:
        print(f"lakesession demo: {e}", file=sys.stderr)
        return 1
    result["session"].close()
    return 0
