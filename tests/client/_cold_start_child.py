"""A new user's first ``lakesession.spark(comet=...)`` (the embedded default) in a process of its own.

Run by ``test_jar_cache_cold.py`` with an empty ``LAKESESSION_CACHE_DIR``; prints one JSON line: how long the
start took, the JVM's class path and ``spark.jars``, and the answer of a query on an Iceberg table.
"""

from __future__ import annotations

import json
import sys
import time

import lakesession

comet = sys.argv[1] == "comet"
started = time.monotonic()
spark = lakesession.spark(comet=comet, warmups=["embedded"], spark_conf={"spark.ui.enabled": "false"})
took = time.monotonic() - started
spark.sql("CREATE NAMESPACE IF NOT EXISTS coldstart")
spark.sql("CREATE TABLE IF NOT EXISTS coldstart.t (id BIGINT) USING iceberg")
spark.sql("INSERT INTO coldstart.t VALUES (1), (2), (3)")
rows = spark.sql("SELECT count(*) AS n FROM coldstart.t").collect()[0]["n"]
sc = spark.sparkContext
print(
    json.dumps(
        {
            "seconds": took,
            "class_path": sc._jvm.System.getProperty("java.class.path"),
            "spark_jars": sc.getConf().get("spark.jars", ""),
            "added_jars": [str(j) for j in sc._jsc.sc().listJars().mkString("\n").split("\n") if j],
            "rows": rows,
        }
    ),
    flush=True,
)
spark.stop()
