"""CTAS under short credentials (issue #22, item 5): with ``credential_ttl=30``, a
``df.writeTo(...).create()`` whose write task outlives the TTL must refresh its credentials for the
staged, not yet committed table. Before the fix the refresh asked ``/credentials`` for a table that
did not exist yet (404 ``NoSuchTableException``) and the CTAS failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SPARK_TEST_CONF

TTL = 30


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.soak
def test_ctas_whose_write_outlives_the_ttl_succeeds(lake: Any, tmp_path: Path) -> None:
    import lakesession

    lake.spark()  # the suite's JVM; this session gets its own SparkSession on it
    s = lakesession.connect(data_dir=tmp_path, credential_ttl=TTL, catalog_name="lake_ctas", spark_conf=SPARK_TEST_CONF)
    try:
        spark = s.spark()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake_ctas.ns")
        # each write task sleeps past the TTL (Thread.sleep via reflect, on its first row: before its
        # writer opens a file) with the credentials the stage-create vended
        sleep = f"reflect('java.lang.Thread', 'sleep', CAST({(TTL + 8) * 1000} AS BIGINT))"
        df = spark.range(0, 1000, 1, 2).selectExpr("id", f"CASE WHEN id % 500 = 0 THEN {sleep} END AS slept")
        df.writeTo("lake_ctas.ns.t").create()
        assert spark.table("lake_ctas.ns.t").count() == 1000
        staged = [
            r
            for r in s.access_log.records()
            if r.action == "refresh_credentials" and r.object == "table ns.t" and r.via != "cache"
        ]
        assert staged and all(r.status == 200 for r in staged), staged  # refreshed, for the staged table
        audit = s.embedded.handle.admin.audit(action="refresh_staged_credentials")
        assert audit and all(a.decision == "allow" for a in audit)
    finally:
        s.close()
