"""Start-up order on a cold JVM: what ``lakesession.spark()`` has done before the first query.

Spark 3.5's first query (even ``SELECT 1``) loads the default catalog, so lakesession starts the
embedded catalog alongside the JVM and loads the catalog on a JVM thread of its own while the user's
first query is parsed. Spark 4's first query does not, but its first *catalog* query would spend
about a second initializing Iceberg's REST catalog in a cold JVM: the ``catalog`` warm-up loads it on a
JVM thread right after the start (issue #33). Each run is a fresh Python process (a cold JVM), as a
notebook's first cell is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import run_cold_child

pytestmark = [pytest.mark.slow, pytest.mark.spark]

CHILD = """
import json, sys, time
import pyspark
import lakesession
from lakesession.gateway._app import GatewayApp

asked = []
early = GatewayApp._early
GatewayApp._early = lambda self, method, path, headers: asked.append(path) or early(self, method, path, headers)
major = int(pyspark.__version__.split(".")[0])
from lakesession._spark._plan import resolve_warmups
warm = "catalog" in resolve_warmups(lakesession.Settings.resolve().warmups)  # LAKESESSION_WARMUPS
spark = lakesession.spark(data_dir=sys.argv[1], spark_conf={"spark.ui.enabled": "false"})
deadline = time.monotonic() + 90
while "/v1/config" not in asked and time.monotonic() < deadline and (major < 4 or warm):
    time.sleep(0.1)
if major >= 4 and not warm:
    time.sleep(3)  # long enough for a preload to have asked (it asks within a second or two of the JVM's start)
before_query = list(asked)
assert spark.sql("SELECT 1").collect()[0][0] == 1
after_select = list(asked)
spark.sql("SHOW NAMESPACES IN lake").collect()
print(json.dumps({"version": pyspark.__version__, "before_query": before_query, "after_select": after_select,
                  "after_catalog_query": list(asked)}))
"""


@pytest.mark.parametrize("warmups", ["all", "classcache,embedded"], ids=["warm-ups on", "catalog warm-up off"])
def test_catalog_is_loaded_before_the_first_catalog_query_by_its_warm_up(tmp_path: Path, warmups: str) -> None:
    from lakesession._sparkbind import first_query_loads_catalog

    result, _ = run_cold_child(CHILD, tmp_path, LAKESESSION_WARMUPS=warmups)
    config = "/v1/config"
    if warmups == "all":
        # loaded before any query: Spark 3.5's first query waits for it, Spark 4's first catalog query finds it
        assert config in result["before_query"], result
    elif first_query_loads_catalog(result["version"]):  # Spark 3.5 without it: its first query (any) loads it
        assert config not in result["before_query"] and config in result["after_select"], result
    else:  # Spark 4 without the warm-up: SELECT 1 needs no catalog, and nothing loaded it meanwhile
        assert config not in result["after_select"], result
    if not first_query_loads_catalog(result["version"]):  # (3.5's warm-up also initializes a throwaway copy)
        # the catalog query used the catalog loaded before it (warm-up) or loaded it itself (off): once either way
        assert result["after_catalog_query"].count(config) == 1, result
    assert any(p.endswith("/namespaces") for p in result["after_catalog_query"]), result
