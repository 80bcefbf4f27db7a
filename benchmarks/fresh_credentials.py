"""Fresh credentials under a Spark query loop: upstream refreshes per TTL per table, STS calls per 1,000 loads.

One SparkSession on the embedded catalog (S3 emulator, vended credentials with a short TTL) queries
``--tables`` tables in turn for ``--ttls`` credential lifetimes. Iceberg's S3FileIO asks the gateway
for credentials on nearly every S3 request once a TTL is short; the gateway answers from its cache
and goes upstream (the catalog's ``/credentials``) only when the cached ones run low. Printed, each
with its target (issue 17):

* upstream credential refreshes per TTL per table (target <= 1.2; a gateway without a cache: one
  per S3 request);
* STS calls per 1,000 loads: AssumeRole calls ÷ the credential loads the JVM made through the
  gateway (table loads carrying credentials + credential requests) (target <= 2); also per 1,000
  loads that reached the catalog, and per TTL per table (the catalog reuses an STS credential only
  while >= 90 % of its lifetime remains: at most 10 per TTL per table however many loads, at least
  one as credentials expire — so the per-1,000 figure depends on how many loads a TTL sees, i.e. on
  the machine's speed and the TTL; with a 3,600 s TTL it is far below 2);
* lifetime left on the credentials the catalog handed out (target >= 90 % of the TTL).

    python benchmarks/fresh_credentials.py [--ttl 12] [--ttls 4] [--tables 2]

The machine is shared: the figures are ratios over the same run, not absolute speeds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@dataclass
class Figures:
    ttl: float
    started: float  # epoch seconds: when the query loop began
    elapsed: float
    tables: int
    queries: int
    upstream_refreshes: dict[str, int]  # table -> the gateway's upstream /credentials calls
    jvm_loads: int  # table loads + credential requests the JVM made through the gateway
    catalog_loads: int  # of those, the ones that reached the catalog
    sts_calls: int
    left_at_handout: list[float]  # fraction of the TTL left on each credential the catalog handed out

    @property
    def refreshes_per_ttl_per_table(self) -> float:
        return max(self.upstream_refreshes.values(), default=0) / (self.elapsed / self.ttl)

    @property
    def sts_per_1000_loads(self) -> float:
        return 1000 * self.sts_calls / max(self.jvm_loads, 1)

    @property
    def sts_per_ttl_per_table(self) -> float:
        return self.sts_calls / (self.elapsed / self.ttl) / max(self.tables, 1)

    @property
    def sts_per_1000_catalog_loads(self) -> float:
        return 1000 * self.sts_calls / max(self.catalog_loads, 1)

    def report(self) -> str:
        left = sorted(self.left_at_handout)
        per_table = ", ".join(f"{t} {n}" for t, n in sorted(self.upstream_refreshes.items()))
        return "\n".join(
            [
                f"{self.queries} queries over {self.elapsed:.0f} s = {self.elapsed / self.ttl:.1f} TTLs of {self.ttl:.0f} s, "
                f"{self.tables} tables (machine shared: ratios, not speeds)",
                f"upstream credential refreshes per TTL per table: {self.refreshes_per_ttl_per_table:.2f} "
                f"(target <= 1.2; upstream refreshes: {per_table})",
                f"STS calls per 1,000 loads: {self.sts_per_1000_loads:.2f} (target <= 2; {self.sts_calls} AssumeRole "
                f"calls, {self.jvm_loads} credential loads by the JVM)",
                f"   per 1,000 loads reaching the catalog: {self.sts_per_1000_catalog_loads:.1f} "
                f"({self.catalog_loads} loads and refreshes upstream)",
                f"   per TTL per table: {self.sts_per_ttl_per_table:.2f} (reuse while >= 90 % remains: <= 10 "
                f"whatever the load; >= 1, credentials expire): <= 2 per 1,000 loads then needs "
                f">= {500 * self.sts_per_ttl_per_table:.0f} loads per TTL per table, this run had "
                f"{self.jvm_loads / (self.elapsed / self.ttl) / max(self.tables, 1):.0f}",
                "lifetime left on handed-out credentials: "
                + (f"min {left[0]:.0%}, median {statistics.median(left):.0%} of the TTL" if left else "none seen")
                + " (target >= 90 %)",
            ]
        )


def run(session: Any, ttl: float, ttls: float, tables: int, catalog: str) -> Figures:
    """Create ``tables`` tables on ``session``'s SparkSession and query them in turn for ``ttls`` TTLs."""
    spark = session.spark()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.fresh")
    names = [f"t{i}" for i in range(tables)]
    for name in names:
        spark.sql(f"CREATE TABLE IF NOT EXISTS {catalog}.fresh.{name} (id BIGINT, kind STRING) USING iceberg")
        for part in range(3):  # a few data files: several S3 reads per query
            spark.sql(
                f"INSERT INTO {catalog}.fresh.{name} SELECT id, CAST(id % 7 AS STRING) FROM range({part}, 3000, 3)"
            )
    handle = session.embedded.handle
    vendor = handle.services.vendor
    sts_before = vendor.sts_calls
    started = time.time()
    queries = 0
    while time.time() - started < ttls * ttl:
        name = names[queries % tables]
        assert spark.sql(f"SELECT count(*), count(DISTINCT kind) FROM {catalog}.fresh.{name}").collect()[0][0] == 3000
        queries += 1
    elapsed = time.time() - started
    sts_calls = vendor.sts_calls - sts_before
    records = [r for r in session.access_log.records(since=started) if r.object.startswith("table fresh.")]
    upstream = {f"fresh.{n}": 0 for n in names}
    jvm_loads = catalog_loads = 0
    left: list[float] = []
    for r in records:
        if r.action == "refresh_credentials":
            jvm_loads += r.count
            if r.via == "upstream":
                upstream[r.object.removeprefix("table ")] += 1
                catalog_loads += 1
        elif r.action == "load_table" and r.credentials_expire_at is not None:
            jvm_loads += 1
            catalog_loads += 1
        else:
            continue
        if r.via != "cache" and r.credentials_expire_at is not None and r.time <= r.credentials_expire_at:
            left.append((r.credentials_expire_at - r.time) / ttl)
    return Figures(ttl, started, elapsed, tables, queries, upstream, jvm_loads, catalog_loads, sts_calls, left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttl", type=int, default=12, help="vended credential lifetime in seconds")
    parser.add_argument("--ttls", type=float, default=4, help="how many lifetimes the query loop runs")
    parser.add_argument("--tables", type=int, default=2)
    args = parser.parse_args()
    for var in [k for k in os.environ if k.startswith("AWS_")]:
        os.environ.pop(var)  # the JVM must use vended credentials only

    import lakesession

    with tempfile.TemporaryDirectory() as data:
        session = lakesession.connect(
            data_dir=data,
            credential_ttl=args.ttl,
            master="local[2]",
            spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        )
        try:
            print(run(session, args.ttl, args.ttls, args.tables, "lake").report())
        finally:
            session.close()


if __name__ == "__main__":
    main()
