"""Shared test support: the seed's view-chain policy, Iceberg view bodies, catalog helpers, cold children, and
the small steps many modules take (a vended load, a seeded shop, a gateway client, an ErrorModel check).

One copy for every test module that builds a reference catalog with views (``test_chains``,
``test_view_spark``, ``test_view_security``, …), so the seed's chain reads the same everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from tests.factories import Policy

OWNER = "trino.run-as-owner"  # the view property naming a DEFINER view's owner
PREFIX = "/v1/lakesession"  # the reference catalog's Iceberg REST prefix


def struct(*fields: tuple[str, str]) -> dict[str, Any]:
    """An Iceberg REST schema (id 0) of optional ``(name, type)`` fields numbered from 1: a request body's part."""
    columns = [{"id": i, "name": name, "type": kind, "required": False} for i, (name, kind) in enumerate(fields, 1)]
    return {"type": "struct", "schema-id": 0, "fields": columns}


SCHEMA = struct(("id", "long"))
#: ``sales.orders`` of the DEFINER-view attacks: an id and the region its views filter on
REGION_SCHEMA = struct(("id", "long"), ("region", "string"))


def seed_chain_grants(namespace: str) -> str:
    """The seed's mixed chain, as bootstrap grant items (users ``alice``, ``bob``, ``carol``).

    alice -> v1 (DEFINER bob) -> v2 (INVOKER) -> v3 (DEFINER carol) -> t_chain
    """
    return f"""\
  # the seed's mixed chain: alice -> v1 (DEFINER bob) -> v2 (INVOKER) -> v3 (DEFINER carol) -> t_chain
  - {{role: r_alice, privilege: VIEW_READ, on: view {namespace}.v1}}
  - {{role: r_bob, privilege: VIEW_READ, on: view {namespace}.v2}}
  - {{role: r_bob, privilege: VIEW_READ, on: view {namespace}.v3}}
  - {{role: r_carol, privilege: TABLE_READ_DATA, on: table {namespace}.t_chain}}
"""


def policy(*, users: Iterable[str], services: Mapping[str, str], grants: str) -> str:
    """Bootstrap YAML: each user in its own role ``r_<user>``, each service in the role given, then ``grants``.

    ``grants`` holds YAML list items (``  - {role: ..., privilege: ..., on: ...}``), e.g. ``seed_chain_grants(ns)``.
    """
    users = list(users)
    principals = [f"  - {{name: {u}, type: user}}" for u in users]
    principals += [f"  - {{name: {s}, type: service}}" for s in services]
    roles = [f"  - {{name: r_{u}, members: [{u}]}}" for u in users]
    roles += [f"  - {{name: {role}, members: [{s}]}}" for s, role in services.items()]
    return "principals:\n" + "\n".join(principals) + "\nroles:\n" + "\n".join(roles) + "\ngrants:\n" + grants


def view_body(
    name: str,
    sql: str = "SELECT * FROM somewhere",
    owner: str | None = None,
    *,
    namespace: str = "sales",
    dialect: str = "spark",
    default_catalog: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A CreateViewRequest body: one SQL representation; ``owner`` makes it a DEFINER view."""
    version: dict[str, Any] = {
        "version-id": 1,
        "timestamp-ms": int(time.time() * 1000),
        "schema-id": 0,
        "summary": {"engine-name": "trino" if dialect == "trino" else "spark"},
        "representations": [{"type": "sql", "sql": sql, "dialect": dialect}],
        "default-namespace": [namespace],
    }
    if default_catalog:
        version["default-catalog"] = default_catalog
    props = {**({OWNER: owner} if owner else {}), **(properties or {})}
    return {"name": name, "schema": SCHEMA, "view-version": version, "properties": props}


EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # RFC 8693's grant
ACCESS = "urn:ietf:params:oauth:token-type:access_token"


def engine_policy(secrets: Mapping[str, str]) -> Policy:
    """The trusted-engine modules' principals: ``etl`` manages the catalog, the ``engine`` service may
    exchange users' tokens, users ``alice`` and ``bob`` in roles ``r_alice``/``r_bob`` (grants the module's)."""
    from tests.factories import Policy

    return (
        Policy()
        .service("etl", secrets["etl"], role="eng")
        .service("engine", secrets["engine"], role="platform")
        .user("alice", secrets["alice"], role="r_alice")
        .user("bob", secrets["bob"], role="r_bob")
        .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
        .grant("platform", "TOKEN_EXCHANGE", "catalog")
    )


def issuer_token(handle: Any, who: str, secret: str) -> str:
    """``who``'s own access token: client credentials at the catalog's issuer (what their own Spark presents)."""
    r = httpx.post(
        f"{handle.issuer_uri}/token",
        data={"grant_type": "client_credentials", "scope": "catalog"},
        auth=(who, secret),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return str(r.json()["access_token"])


def exchange_response(handle: Any, client: str, secret: str, subject_token: str) -> httpx.Response:
    """RFC 8693 token exchange: ``client`` authenticates with its own credentials and acts for the subject."""
    return httpx.post(
        f"{handle.issuer_uri}/token",
        data={"grant_type": EXCHANGE, "subject_token": subject_token, "subject_token_type": ACCESS},
        auth=(client, secret),
        timeout=30,
    )


def bearer(handle: Any, who: str) -> dict[str, str]:
    """An Authorization header acting as ``who`` (a token the reference catalog's issuer minted directly)."""
    return {"Authorization": f"Bearer {handle.admin.token_for(who)}"}


def create_view(handle: Any, namespace: str, body: dict[str, Any], who: str = "admin") -> None:
    """Create a view over real HTTP (pyiceberg 0.12 cannot create views)."""
    r = httpx.post(
        f"{handle.uri}{PREFIX}/namespaces/{namespace}/views", json=body, headers=bearer(handle, who), timeout=30
    )
    assert r.status_code == 200, r.text


def catalog_as(handle: Any, who: str, name: str = "lake") -> Any:
    """lakesession's pyiceberg RestCatalog acting as ``who`` with a static token."""
    from lakesession.catalog import rest_catalog
    from lakesession.identity import StaticToken

    return rest_catalog(name, handle.uri, StaticToken(handle.admin.token_for(who)), warehouse=handle.warehouse)


def run_cold_child(code: str, tmp_path: Path, **env_extra: str) -> tuple[dict[str, Any], str]:
    """Run ``code`` in a fresh Python (a cold JVM, as a notebook's first cell) on the embedded default.

    ``argv[1]`` is the embedded catalog's data dir under ``tmp_path``; the child prints JSON as its
    last stdout line. Returns that and the child's stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # as the suite's lake fixture
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")) if p
    )
    env["LAKESESSION_CONFIG"] = str(tmp_path / "none.toml")  # the embedded default, whatever the machine's config
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "embedded")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def dump_class_archive(path: Path) -> bytes:
    """A real, mappable class-data archive, as a JVM writes it at exit (``java -XX:ArchiveClassesAtExit``)."""
    from lakesession._spark import _classcache
    from lakesession._spark.jars import java_executable

    cmd = [java_executable(), f"-XX:ArchiveClassesAtExit={path}", _classcache.QUIET, "-version"]
    subprocess.run(cmd, check=True, capture_output=True)
    return path.read_bytes()


def fake_spark_home(tmp_path: Path) -> Path:
    """A SPARK_HOME with one jar: what the class cache keys its archive on."""
    (tmp_path / "spark" / "jars").mkdir(parents=True)
    (tmp_path / "spark" / "jars" / "spark-core.jar").write_bytes(b"jar")
    return tmp_path / "spark"


def error_model(r: httpx.Response, status: int, kind: str, *words: str) -> str:
    """Assert ``r`` is the catalog's ErrorModel of ``status`` and type ``kind`` whose message names each of
    ``words``; the message. One check for every refusal a test reads (400s, 401s, ...)."""
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == kind and error["code"] == status
    for word in words:
        assert word in error["message"], error["message"]
    return str(error["message"])


def bad_request(r: httpx.Response, *words: str) -> str:
    """Assert ``r`` is the catalog's 400 ErrorModel whose message names each of ``words``; the message."""
    return error_model(r, 400, "BadRequestException", *words)


def shared_namespace(handle: Any, http: httpx.Client, namespace: str, who: str = "etl") -> dict[str, str]:
    """``who``'s headers once ``namespace`` exists on the session's shared catalog (made here, or by an earlier
    module: 409): the metadata modules' first step."""
    headers = bearer(handle, who)
    r = http.post(f"{PREFIX}/namespaces", json={"namespace": [namespace]}, headers=headers)
    assert r.status_code in (200, 409), r.text
    return headers


def java_major(java: str) -> int:
    """The major version ``java`` runs (0 when it cannot say): lakesession's own probe (``_spark._java``)."""
    from lakesession._spark._java import major, probe
    from lakesession.errors import JavaNotFoundError

    try:
        return major(probe(java))
    except JavaNotFoundError:
        return 0


def load_vended(uri: str, token: str, namespace: str, table: str) -> httpx.Response:
    """loadTable over real HTTP with ``token``, asking for vended credentials (as an engine's first call); the
    200 answer. One copy for the stores' and clouds' modules, which each then read their own keys from it."""
    r = httpx.get(
        f"{uri}{PREFIX}/namespaces/{namespace}/tables/{table}",
        headers={"Authorization": f"Bearer {token}", "X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    assert r.status_code == 200, r.text
    return r


def seed_shop(handle: Any, name: str, credential: str, tables: Iterable[str] = ("orders",)) -> Any:
    """etl's catalog after its first move in the emulator modules: namespace ``shop``, each table holding one
    ``id`` row (something for a reader's key to open). One copy so the gateway and union-key modules agree."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from tests.factories import vended_catalog

    etl = vended_catalog(handle, name, credential)
    etl.create_namespace("shop")
    for table in tables:
        etl.create_table(("shop", table), Schema(NestedField(1, "id", LongType(), required=False))).append(
            pa.table({"id": pa.array([1], pa.int64())})
        )
    return etl


@contextmanager
def gateway_client(handle: Any, who: str = "alice", timeout: float = 30) -> Iterator[tuple[Any, httpx.Client]]:
    """A session's gateway in front of ``handle`` acting as ``who``, and a client holding its secret: what
    Spark's REST client is to the gateway, for the tests that attack the gateway's own endpoints."""
    from lakesession.gateway import Gateway

    with (
        Gateway(handle.uri, lambda: handle.admin.token_for(who)) as g,
        httpx.Client(base_url=g.uri, timeout=timeout) as c,
    ):
        c.headers["Authorization"] = f"Bearer {g.secret}"
        yield g, c


def store_denied(call: Any) -> bool:
    """Whether the store refuses ``call``: S3's ``AccessDenied``, or a bare 403 (a HEAD has no error body).
    Another store error, or none, is ``False``: the attack tests assert the refusal, not just a failure."""
    from botocore.exceptions import ClientError

    try:
        call()
    except ClientError as e:
        return e.response["Error"]["Code"] in ("AccessDenied", "403")
    return False


@contextmanager
def granted(handle: Any, role: str, privilege: str, securable: str) -> Iterator[None]:
    """``privilege`` on ``securable`` granted to ``role`` for the block only: a module's catalog outlives its
    tests, so a grant a test needs must not leak into the next one."""
    handle.admin.grant(role, privilege, securable)
    try:
        yield
    finally:
        handle.admin.revoke(role, privilege, securable)


def load_script(name: str, path: Path) -> ModuleType:
    """The Python file ``path`` (a build or docs script, no package) loaded as module ``name``, by path: an
    installed module of the same name must not stand in for it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
