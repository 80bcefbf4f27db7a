"""Scan throughput: vended credentials through the gateway vs standing keys vs remote signing, same JVM, same table.

One SparkSession on the embedded catalog (S3 emulator). A table of a few hundred MB is written
once; then the same full scan runs through two catalogs registered in the same JVM:

* ``lake`` — lakesession's catalog: the gateway, vended per-table credentials (refreshed via the
  gateway's /credentials when they near expiry);
* ``keys`` — the same gateway for metadata, but S3FileIO with the emulator's standing admin keys
  and no access delegation (what a cluster with static keys does);
* ``signed`` — a second session on the same catalog with ``access="remote-signing"`` (its own
  SparkSession on the same JVM, its own gateway): no storage credentials in the JVM, each S3
  request signed by the catalog, JVM → gateway → catalog.

Best of N (default 3) per variant, alternating; prints the ratio keys_time / vended_time, i.e.
vended throughput ÷ standing-keys throughput (target >= 0.95), and signed_time / vended_time,
the scan time with remote signing ÷ with vended credentials (target <= 1.5).

    python benchmarks/spark_read.py [--mb 250] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

QUERY = "SELECT count(*), sum(length(a)), sum(length(b)), max(id) FROM {cat}.bench.wide"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=250, help="approximate table size in MB (parquet)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for var in [k for k in os.environ if k.startswith("AWS_")]:
        os.environ.pop(var)  # only the keys configured below, never ambient ones

    import lakesession

    with tempfile.TemporaryDirectory() as data:
        s = lakesession.connect(
            data_dir=data,
            master="local[2]",
            spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        )
        spark = s.spark()
        emulator = s.embedded.handle.s3_emulator
        admin = emulator.admin_credentials
        gw = s.gateway
        keys = {
            "spark.sql.catalog.keys": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.keys.type": "rest",
            "spark.sql.catalog.keys.uri": gw.uri,
            "spark.sql.catalog.keys.token": gw.secret,
            "spark.sql.catalog.keys.warehouse": s.warehouse or "",
            "spark.sql.catalog.keys.cache-enabled": "false",
            "spark.sql.catalog.keys.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "spark.sql.catalog.keys.s3.endpoint": emulator.endpoint,
            "spark.sql.catalog.keys.s3.path-style-access": "true",
            "spark.sql.catalog.keys.client.region": "us-east-1",
            "spark.sql.catalog.keys.s3.access-key-id": admin.access_key_id,
            "spark.sql.catalog.keys.s3.secret-access-key": admin.secret_access_key,
        }
        for k, v in keys.items():
            spark.conf.set(k, v)
        emb = s.embedded
        signing = lakesession.connect(
            uri=emb.uri,
            credential=f"demo:{emb.demo_secret}",
            token_url=emb.token_endpoint,
            warehouse=s.warehouse,
            access="remote-signing",
        )
        sessions = {"lake": spark, "keys": spark, "signed": signing.spark()}
        rows = args.mb * 1024 * 1024 // 75  # ~75 bytes/row of zstd parquet: two sha2 hex strings + a long
        t0 = time.perf_counter()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.bench")
        spark.sql(
            "CREATE TABLE lake.bench.wide USING iceberg TBLPROPERTIES ('write.parquet.compression-codec'='zstd') AS "
            "SELECT id, sha2(CAST(id AS STRING), 256) AS a, sha2(CAST(id * 7 AS STRING), 256) AS b "
            f"FROM range(0, {rows}, 1, 8)"
        )
        # (the snapshot summary, not the .files metadata table: the gateway answers a 500 for its probe)
        summary = s.catalog.load_table(("bench", "wide")).current_snapshot().summary
        size = int(summary["total-files-size"])
        print(f"wrote {rows} rows, {size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f}s")
        expected = None
        best: dict[str, float] = dict.fromkeys(sessions, float("inf"))
        for i in range(args.runs + 1):  # the first round warms every path and is not counted
            for variant, session in sessions.items():
                cat = "keys" if variant == "keys" else "lake"
                t = time.perf_counter()
                result = tuple(session.sql(QUERY.format(cat=cat)).collect()[0])
                elapsed = time.perf_counter() - t
                expected = expected or result
                assert result == expected, (variant, result, expected)
                if i:
                    best[variant] = min(best[variant], elapsed)
                print(f"round {i}{' (warm-up)' if not i else ''}: {variant:6s} {elapsed:.2f}s")
        vended = size / best["lake"] / 1e6
        standing = size / best["keys"] / 1e6
        print(
            f"best of {args.runs}: vended via gateway {best['lake']:.2f}s ({vended:.0f} MB/s), "
            f"standing keys {best['keys']:.2f}s ({standing:.0f} MB/s)"
        )
        print(f"remote signing {best['signed']:.2f}s ({size / best['signed'] / 1e6:.0f} MB/s)")
        print(f"ratio vended/standing throughput = {best['keys'] / best['lake']:.3f} (target >= 0.95)")
        signs = sum(r.count for r in signing.access_log.records() if r.action == "sign_request")
        print(
            f"ratio remote-signing/vended scan time = {best['signed'] / best['lake']:.3f} (target <= 1.5); "
            f"{signs} signer calls through the gateway"
        )
        signing.close()
        s.close()


if __name__ == "__main__":
    main()
