"""Cluster mode: a Spark standalone master + worker (separate JVMs); executors read and write S3
through vended credentials and refresh them through the driver's gateway.

One cluster and one driver (with its executor) serve the module's tests (``cluster``, ``driver``): starting
them is most of the time, and neither test changes what the other relies on (each works on tables of its own
namespace). The driver runs in a child process (``tests/_cluster_driver.py``): the suite's shared SparkSession
is local and a process can hold only one SparkContext.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._cluster import Cluster, auth_file, standalone_cluster
from tests._cluster_driver import FILES, Driver, cluster_driver

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TTL = 3  # s: vended credentials' lifetime; the refresh test spans one, then two of them inside one query


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


@pytest.fixture(scope="module")
def driver(cluster: Cluster) -> Iterator[Driver]:
    with cluster_driver(cluster, cluster.tmp / "driver", TTL) as running:
        yield running


def test_executors_use_and_refresh_vended_credentials(driver: Driver) -> None:
    result = driver.ask("refresh")
    assert result["executors"] == 1
    assert result["location"].startswith("s3://")
    assert result["counts"] and result["counts"][0] == 6667
    assert result["counts"] == sorted(result["counts"])  # each pass saw the rows written before it
    assert result["files"] == FILES  # the slow query opens FILES files, one after another
    assert result["slow"] == FILES * 1000 and result["slow_seconds"] > 2 * TTL  # outlived two TTLs in one query
    assert result["refreshes"] > 0  # executor JVMs asked the gateway for fresh credentials


def test_a_process_without_the_secret_fetches_no_block_from_the_cluster(cluster: Cluster, driver: Driver) -> None:
    """The driver and its executor on a standalone cluster started the documented way (``tests/_cluster.py``):
    after a read whose broadcast carries vended keys, an attacker with no secret fetches nothing from either."""
    from tests import _blockthief

    report = driver.ask("victim")
    assert report["rows"] == 2 and report["authenticate"] == "true"
    targets = _blockthief.targets(report["pid"])
    executors = [t for pid in cluster.executors() for t in _blockthief.targets(pid)]
    assert executors, "no executor is listening: the cluster ran nothing"
    secret = next(
        line.split()[1] for line in auth_file(cluster.tmp).read_text().splitlines() if line.startswith(SECRET_KEY)
    )
    shown = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, secret)]
    assert shown == []  # on no command line: not the driver's, the master's, the worker's or the executor's
    stolen = _blockthief.run(targets + executors)
    assert stolen["fetched"] == {}, sorted(stolen["fetched"])
    assert set(stolen["refused"]) == {str(p) for _, p in targets + executors}


SECRET_KEY = "spark.authenticate.secret "


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False
