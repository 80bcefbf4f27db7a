"""View endpoints of the reference catalog, on a minimal app (namespaces + views routers).

Every JSON response is validated against the Iceberg REST OpenAPI spec.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from pyiceberg.catalog.rest import ListViewsResponse, ViewResponse
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from lakesession.reference import errors, store
from lakesession.reference.audit import AuditLog
from lakesession.reference.context import Services
from lakesession.reference.directory import Directory
from lakesession.reference.routes import config as config_routes
from lakesession.reference.routes import namespaces as ns_routes
from lakesession.reference.routes import views as view_routes
from lakesession.reference.settings import ServerSettings

SPEC = Path(__file__).resolve().parents[2] / "lakesession" / "reference" / "spec" / "rest-catalog-open-api.yaml"
if not SPEC.exists():
    SPEC = Path("/work/shared/spec/rest-catalog-open-api.yaml")

P = "/v1/lakesession"
VIEWS = f"{P}/namespaces/ns/views"


@pytest.fixture(scope="module")
def openapi() -> OpenAPI | None:
    return OpenAPI.from_file_path(str(SPEC)) if SPEC.exists() else None


@pytest.fixture(scope="module")
def error_validator() -> Any:
    """The spec's ``IcebergErrorResponse``. (Several inline 404/409 responses of the spec name the bare
    ``ErrorModel`` although their examples, and every implementation, wrap it in ``{"error": ...}``.)"""
    if not SPEC.exists():
        return None
    spec = yaml.safe_load(SPEC.read_text())
    registry = Registry().with_resource("urn:spec", Resource.from_contents(spec, default_specification=DRAFT202012))
    return Draft202012Validator({"$ref": "urn:spec#/components/schemas/IcebergErrorResponse"}, registry=registry)


class FakeVerifier:
    def verify(self, token: str) -> dict[str, Any]:
        return {"sub": token}


class Api:
    """TestClient wrapper: bearer token = principal name; every JSON response is checked against the spec."""

    def __init__(
        self, client: TestClient, openapi: OpenAPI | None, error_validator: Any, services: Services, tmp: Path
    ):
        self.client, self.openapi, self.services, self.tmp = client, openapi, services, tmp
        self.error_validator = error_validator
        self.warehouse = services.settings.warehouse

    def call(
        self,
        method: str,
        path: str,
        who: str = "admin",
        body: Any = None,
        raw: bytes | None = None,
        params: dict[str, Any] | None = None,
        expect: int | None = None,
    ) -> Any:
        headers = {"Authorization": f"Bearer {who}"} if who else {}
        if raw is not None:
            headers["Content-Type"] = "application/json"
        r = self.client.request(
            method,
            path,
            headers=headers,
            params=params,
            content=raw if raw is not None else (json.dumps(body) if body is not None else None),
        )
        assert r.status_code < 500, r.text
        if expect is not None:
            assert r.status_code == expect, (r.status_code, r.text)
        if r.content and self.openapi is not None:
            self._validate(method, path, params, r)
        return r

    def _validate(self, method: str, path: str, params: dict[str, Any] | None, r: Any) -> None:
        if r.status_code >= 400:
            self.error_validator.validate(r.json())
            return
        req = MockRequest("http://localhost", method.lower(), path, args={k: str(v) for k, v in (params or {}).items()})
        resp = MockResponse(
            r.content, status_code=r.status_code, content_type=r.headers.get("content-type", "application/json")
        )
        self.openapi.validate_response(req, resp)

    def ok(self, method: str, path: str, body: Any = None, who: str = "admin", **kw: Any) -> Any:
        r = self.call(method, path, who, body, expect=200, **kw)
        return r.json()

    def error(
        self, method: str, path: str, status: int, type_: str, body: Any = None, who: str = "admin", **kw: Any
    ) -> dict:
        r = self.call(method, path, who, body, expect=status, **kw)
        if method.upper() == "HEAD":
            return {}
        err = r.json()["error"]
        assert err["code"] == status and err["type"] == type_, err
        return err

    def create(self, name: str, ns: str = "ns", who: str = "admin", **overrides: Any) -> dict:
        return self.ok("POST", f"{P}/namespaces/{ns}/views", create_body(name, ns, **overrides), who=who)

    def commit(self, name: str, updates: list, requirements: list | None = None, ns: str = "ns", **kw: Any) -> Any:
        body = {"updates": updates}
        if requirements is not None:
            body["requirements"] = requirements
        return self.call("POST", f"{P}/namespaces/{ns}/views/{name}", kw.pop("who", "admin"), body, **kw)


def schema_json(*cols: tuple[int, str, str], schema_id: int = 0) -> dict:
    return {
        "type": "struct",
        "schema-id": schema_id,
        "fields": [{"id": i, "name": n, "type": t, "required": False} for i, n, t in cols],
    }


def version_json(
    sql: str = "SELECT 1 AS id",
    dialect: str = "spark",
    schema_id: int = 0,
    version_id: int = 1,
    ns: str = "ns",
    ts: int | None = None,
    **extra: Any,
) -> dict:
    return {
        "version-id": version_id,
        "timestamp-ms": ts or int(time.time() * 1000),
        "schema-id": schema_id,
        "summary": {"engine-name": "spark"},
        "representations": [{"type": "sql", "sql": sql, "dialect": dialect}],
        "default-namespace": [ns],
        **extra,
    }


def create_body(name: str, ns: str = "ns", **overrides: Any) -> dict:
    body = {
        "name": name,
        "schema": schema_json((1, "id", "long")),
        "view-version": version_json(ns=ns),
        "properties": {"comment": "a view"},
    }
    body.update(overrides)
    return body


@pytest.fixture
def api(tmp_path: Path, openapi: OpenAPI | None, error_validator: Any):
    url = store.sqlite_url(tmp_path / "cat.db")
    engine = store.make_engine(url)
    warehouse = f"file://{tmp_path}/wh"
    catalog = SqlCatalog("lakesession", uri=url, warehouse=warehouse)
    directory = Directory(engine)
    services = Services(
        settings=ServerSettings(warehouse=warehouse, db_url=url),
        directory=directory,
        audit=AuditLog(engine),
        catalog=catalog,
        verifier=FakeVerifier(),
    )
    app = FastAPI()
    app.state.services = services
    app.state.endpoints = []
    errors.install_error_handlers(app)
    app.include_router(config_routes.router)
    app.include_router(ns_routes.router)
    app.include_router(view_routes.router)
    for who in ("admin", "nobody", "alice"):
        directory.create_principal(who)
    directory.create_role("admins", ["admin"])
    directory.grant("admins", "CATALOG_MANAGE_CONTENT", "catalog")
    with TestClient(app) as client:
        a = Api(client, openapi, error_validator, services, tmp_path)
        for ns in ("ns", "other"):
            a.ok("POST", f"{P}/namespaces", {"namespace": [ns]})
        yield a


def local_path(location: str) -> Path:
    return Path(urlparse(location).path)


def audit_rows(api: Api, principal: str) -> list[tuple[str, str, str]]:
    with api.services.audit.engine.connect() as conn:
        rows = conn.execute(store.audit.select().where(store.audit.c.principal == principal)).all()
    return [(r.action, r.securable, r.decision) for r in rows]


# ---------------------------------------------------------------- create / load / exists / list
def test_create_and_load(api: Api) -> None:
    body = create_body(
        "v1",
        schema=schema_json((1, "id", "long"), (2, "name", "string"), schema_id=7),
        **{"view-version": version_json(schema_id=7, version_id=42, ts=1700000000000)},
    )
    res = api.ok("POST", VIEWS, body)
    assert res["config"] == {}
    md = res["metadata"]
    assert md["format-version"] == 1
    assert md["location"] == f"{api.warehouse}/ns/v1"
    assert md["current-version-id"] == 1
    assert md["properties"] == {"comment": "a view"}
    assert [s["schema-id"] for s in md["schemas"]] == [0]
    assert [f["name"] for f in md["schemas"][0]["fields"]] == ["id", "name"]
    (v,) = md["versions"]
    assert v["version-id"] == 1 and v["schema-id"] == 0 and v["timestamp-ms"] == 1700000000000
    assert v["representations"] == [{"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}]
    assert v["default-namespace"] == ["ns"] and v["summary"] == {"engine-name": "spark"}
    assert "default-catalog" not in v
    assert md["version-log"] == [{"timestamp-ms": 1700000000000, "version-id": 1}]
    loc = res["metadata-location"]
    assert loc.startswith(f"{md['location']}/metadata/00000-") and loc.endswith(".metadata.json")
    assert json.loads(local_path(loc).read_text()) == md  # the file is the metadata, exactly

    loaded = api.ok("GET", f"{VIEWS}/v1")
    assert loaded == res
    parsed = ViewResponse.model_validate(loaded)
    assert parsed.metadata.view_uuid == md["view-uuid"] and parsed.metadata_location == loc
    api.call("HEAD", f"{VIEWS}/v1", expect=204)


def test_create_location_and_catalog(api: Api) -> None:
    res = api.create(
        "v",
        location=f"{api.warehouse}/ns/custom/place/",  # anywhere inside its namespace's home
        **{"view-version": version_json(**{"default-catalog": "lakesession"})},
    )
    md = res["metadata"]
    assert md["location"] == f"{api.warehouse}/ns/custom/place"
    assert md["versions"][0]["default-catalog"] == "lakesession"
    assert local_path(res["metadata-location"]).parent == local_path(f"{api.warehouse}/ns/custom/place/metadata")
    for bad in (f"file://{api.tmp}/elsewhere", f"{api.warehouse}/../escape", f"{api.warehouse}x/v"):
        api.error("POST", VIEWS, 400, "BadRequestException", create_body("w", location=bad))
    api.error(
        "POST",
        VIEWS,
        400,
        "BadRequestException",
        create_body("w", properties={"write.metadata.path": f"file://{api.tmp}/outside"}),
    )
    api.error("GET", f"{VIEWS}/w", 404, "NoSuchViewException")


def test_create_conflicts_and_missing(api: Api) -> None:
    api.create("v")
    err = api.error("POST", VIEWS, 409, "AlreadyExistsException", create_body("v"))
    assert "ns.v" in err["message"]
    api.services.catalog.create_table(("ns", "t"), Schema(NestedField(1, "id", LongType(), required=False)))
    api.error("POST", VIEWS, 409, "AlreadyExistsException", create_body("t"))
    api.error("POST", f"{P}/namespaces/missing/views", 404, "NoSuchNamespaceException", create_body("v"))
    api.error("POST", "/v1/wrongprefix/namespaces/ns/views", 404, "NotFoundException", create_body("v"))
    # no query, duplicate dialects, duplicate field ids
    api.error(
        "POST",
        VIEWS,
        400,
        "BadRequestException",
        create_body("x", **{"view-version": {**version_json(), "representations": []}}),
    )
    two = version_json()
    two["representations"] *= 2
    api.error("POST", VIEWS, 400, "BadRequestException", create_body("x", **{"view-version": two}))
    api.error(
        "POST",
        VIEWS,
        400,
        "BadRequestException",
        create_body("x", schema=schema_json((1, "a", "long"), (1, "b", "long"))),
    )


def test_exists_and_list_pagination(api: Api) -> None:
    api.call("HEAD", f"{VIEWS}/nope", expect=404)
    names = [f"v{i}" for i in (3, 1, 4, 0, 2)]
    for n in names:
        api.create(n)
    api.create("elsewhere", ns="other")
    everything = api.ok("GET", VIEWS)
    assert everything["identifiers"] == [{"namespace": ["ns"], "name": n} for n in sorted(names)]
    assert everything.get("next-page-token") is None
    ListViewsResponse.model_validate(everything)
    seen, token, pages = [], None, 0
    while True:
        params = {"pageSize": 2, **({"pageToken": token} if token else {})}
        page = api.ok("GET", VIEWS, params=params)
        pages += 1
        assert len(page["identifiers"]) <= 2
        seen += [i["name"] for i in page["identifiers"]]
        token = page.get("next-page-token")
        if not token:
            break
    assert seen == sorted(names) and pages == 3
    api.error("GET", VIEWS, 400, "BadRequestException", params={"pageSize": 0})
    api.error("GET", VIEWS, 400, "BadRequestException", params={"pageToken": "!!!not-a-token"})
    api.error("GET", f"{P}/namespaces/missing/views", 404, "NoSuchNamespaceException")
    assert api.ok("GET", f"{P}/namespaces/other/views")["identifiers"] == [
        {"namespace": ["other"], "name": "elsewhere"}
    ]


# ---------------------------------------------------------------- replace
def java_replace(uuid: str, sql: str, schema: dict | None = None, **version_extra: Any) -> tuple[list, list]:
    """The updates Iceberg Java's REST client sends for CREATE OR REPLACE VIEW."""
    updates: list[dict] = []
    if schema is not None:
        updates.append({"action": "add-schema", "schema": schema, "last-column-id": 3})
    updates.append(
        {
            "action": "add-view-version",
            "view-version": version_json(sql, schema_id=-1 if schema else 0, version_id=2, **version_extra),
        }
    )
    updates.append({"action": "set-current-view-version", "view-version-id": -1})
    return updates, [{"type": "assert-view-uuid", "uuid": uuid}]


def test_replace_adds_schema_and_version(api: Api) -> None:
    created = api.create("v")
    uuid = created["metadata"]["view-uuid"]
    updates, reqs = java_replace(
        uuid, "SELECT 1 AS id, 'x' AS name", schema_json((1, "id", "long"), (2, "name", "string"), schema_id=1)
    )
    res = api.commit("v", updates, reqs, expect=200).json()
    md = res["metadata"]
    assert md["view-uuid"] == uuid and md["current-version-id"] == 2
    assert [s["schema-id"] for s in md["schemas"]] == [0, 1]
    assert [(v["version-id"], v["schema-id"]) for v in md["versions"]] == [(1, 0), (2, 1)]
    assert [e["version-id"] for e in md["version-log"]] == [1, 2]
    assert md["version-log"][1]["timestamp-ms"] == md["versions"][1]["timestamp-ms"]
    loc = res["metadata-location"]
    assert Path(loc).name.startswith("00001-")
    assert json.loads(local_path(loc).read_text()) == md
    assert local_path(created["metadata-location"]).exists()  # history is kept
    assert ViewResponse.model_validate(res).metadata.current_version_id == 2
    assert api.ok("GET", f"{VIEWS}/v") == res

    # next commit: version id -1 means "a new id", schema -1 resolves to the re-added (existing) schema
    updates = [
        {"action": "add-schema", "schema": schema_json((1, "id", "long"), schema_id=99)},
        {"action": "add-view-version", "view-version": version_json("SELECT 2 AS id", schema_id=-1, version_id=-1)},
        {"action": "set-current-view-version", "view-version-id": -1},
    ]
    md3 = api.commit("v", updates, expect=200).json()
    assert Path(md3["metadata-location"]).name.startswith("00002-")
    md3 = md3["metadata"]
    assert [s["schema-id"] for s in md3["schemas"]] == [0, 1]
    assert md3["current-version-id"] == 3
    assert md3["versions"][-1]["schema-id"] == 0


def test_replace_reuses_identical_version(api: Api) -> None:
    created = api.create("v")
    same = {"action": "add-view-version", "view-version": version_json(version_id=7, ts=1)}
    # identical to the current version: nothing changes, nothing is written
    res = api.commit("v", [same, {"action": "set-current-view-version", "view-version-id": -1}], expect=200).json()
    assert res == created
    assert len(list(local_path(created["metadata-location"]).parent.iterdir())) == 1
    # move to version 2, then back to the (reused) version 1
    api.commit(
        "v",
        [
            {"action": "add-view-version", "view-version": version_json("SELECT 2 AS id", version_id=2)},
            {"action": "set-current-view-version", "view-version-id": 2},
        ],
        expect=200,
    )
    before = int(time.time() * 1000)
    md = api.commit("v", [same, {"action": "set-current-view-version", "view-version-id": -1}], expect=200).json()[
        "metadata"
    ]
    assert [v["version-id"] for v in md["versions"]] == [1, 2]
    assert md["current-version-id"] == 1
    assert [e["version-id"] for e in md["version-log"]] == [1, 2, 1]
    assert md["version-log"][-1]["timestamp-ms"] >= before  # re-activation is logged at commit time
    # explicit set-current to an existing version
    md = api.commit("v", [{"action": "set-current-view-version", "view-version-id": 2}], expect=200).json()["metadata"]
    assert md["current-version-id"] == 2 and len(md["version-log"]) == 4


def test_replace_properties_location_uuid_format(api: Api) -> None:
    created = api.create("v", properties={"a": "1", "b": "2"})
    uuid = created["metadata"]["view-uuid"]
    new_loc = f"{api.warehouse}/ns/moved"
    res = api.commit(
        "v",
        [
            {"action": "assign-uuid", "uuid": uuid},
            {"action": "upgrade-format-version", "format-version": 1},
            {"action": "set-properties", "updates": {"b": "20", "c": "3"}},
            {"action": "remove-properties", "removals": ["a", "not-there"]},
            {"action": "set-location", "location": new_loc + "/"},
        ],
        [{"type": "assert-view-uuid", "uuid": uuid}],
        expect=200,
    ).json()
    md = res["metadata"]
    assert md["properties"] == {"b": "20", "c": "3"}
    assert md["location"] == new_loc and md["view-uuid"] == uuid and md["format-version"] == 1
    assert res["metadata-location"].startswith(f"{new_loc}/metadata/00001-")
    assert md["versions"] == created["metadata"]["versions"] and md["version-log"] == created["metadata"]["version-log"]
    # only no-op updates: same metadata back
    assert (
        api.commit(
            "v", [{"action": "assign-uuid", "uuid": uuid}, {"action": "set-location", "location": new_loc}], expect=200
        ).json()
        == res
    )


@pytest.mark.parametrize(
    "updates,reqs,status,type_",
    [
        (
            [{"action": "set-properties", "updates": {"x": "1"}}],
            [{"type": "assert-view-uuid", "uuid": "wrong"}],
            409,
            "CommitFailedException",
        ),
        ([{"action": "assign-uuid", "uuid": "another-uuid"}], None, 400, "BadRequestException"),
        ([{"action": "upgrade-format-version", "format-version": 2}], None, 400, "BadRequestException"),
        ([{"action": "upgrade-format-version", "format-version": 0}], None, 400, "BadRequestException"),
        ([{"action": "add-spec", "spec": {}}], None, 400, "BadRequestException"),
        ([{"action": "no-such-action"}], None, 400, "BadRequestException"),
        ([{"action": "set-current-view-version", "view-version-id": 9}], None, 400, "BadRequestException"),
        ([{"action": "set-current-view-version", "view-version-id": -1}], None, 400, "BadRequestException"),
        ([{"action": "add-view-version", "view-version": version_json(schema_id=5)}], None, 400, "BadRequestException"),
        (
            [{"action": "add-view-version", "view-version": version_json("SELECT 9", schema_id=-1)}],
            None,
            400,
            "BadRequestException",
        ),
        (
            [
                {
                    "action": "add-view-version",
                    "view-version": {
                        **version_json(),
                        "representations": [
                            {"type": "sql", "sql": "a", "dialect": "spark"},
                            {"type": "sql", "sql": "b", "dialect": "SPARK"},
                        ],
                    },
                }
            ],
            None,
            400,
            "BadRequestException",
        ),
        # dropping the spark dialect is refused unless replace.drop-dialect.allowed
        (
            [
                {"action": "add-view-version", "view-version": version_json("SELECT 1", dialect="trino", version_id=2)},
                {"action": "set-current-view-version", "view-version-id": -1},
            ],
            None,
            400,
            "BadRequestException",
        ),
        (
            [{"action": "set-properties", "updates": {"version.history.num-entries": "0"}}],
            None,
            400,
            "BadRequestException",
        ),
        (
            [{"action": "set-properties", "updates": {"version.history.num-entries": "many"}}],
            None,
            400,
            "BadRequestException",
        ),
        ([{"action": "set-location", "location": "file:///tmp/not-the-warehouse"}], None, 400, "BadRequestException"),
        ([{"action": "set-location", "location": ""}], None, 400, "BadRequestException"),
        (
            [{"action": "add-schema", "schema": schema_json((1, "a", "long"), (1, "b", "long"))}],
            None,
            400,
            "BadRequestException",
        ),
        ([{"action": "set-properties", "updates": {"x": 1}}], None, 400, "BadRequestException"),
        ([], [{"type": "assert-table-uuid", "uuid": "x"}], 400, "BadRequestException"),
    ],
)
def test_replace_rejections(api: Api, updates: list, reqs: list | None, status: int, type_: str) -> None:
    created = api.create("v")
    api.error(
        "POST",
        f"{VIEWS}/v",
        status,
        type_,
        {"updates": updates, **({"requirements": reqs} if reqs is not None else {})},
    )
    assert api.ok("GET", f"{VIEWS}/v") == created  # nothing changed


def test_replace_dialect_drop_allowed_and_identifier(api: Api) -> None:
    uuid = api.create("v", properties={"replace.drop-dialect.allowed": "true"})["metadata"]["view-uuid"]
    md = api.commit(
        "v",
        [
            {"action": "add-view-version", "view-version": version_json("SELECT 1", dialect="trino", version_id=2)},
            {"action": "set-current-view-version", "view-version-id": -1},
        ],
        [{"type": "assert-view-uuid", "uuid": uuid}],
        expect=200,
    ).json()["metadata"]
    assert md["versions"][-1]["representations"][0]["dialect"] == "trino"
    body = {"identifier": {"namespace": ["ns"], "name": "other"}, "updates": []}
    api.error("POST", f"{VIEWS}/v", 400, "BadRequestException", body)
    body["identifier"]["name"] = "v"
    api.ok("POST", f"{VIEWS}/v", body)
    api.error("POST", f"{VIEWS}/missing", 404, "NoSuchViewException", {"updates": []})


def test_version_expiry(api: Api) -> None:
    api.create("v", properties={"version.history.num-entries": "2"})
    for i in range(2, 5):
        md = api.commit(
            "v",
            [
                {"action": "add-view-version", "view-version": version_json(f"SELECT {i}", version_id=i)},
                {"action": "set-current-view-version", "view-version-id": -1},
            ],
            expect=200,
        ).json()["metadata"]
    assert [v["version-id"] for v in md["versions"]] == [3, 4]
    assert [e["version-id"] for e in md["version-log"]] == [3, 4]
    assert md["current-version-id"] == 4


def test_optimistic_concurrency(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    created = api.create("v")
    vs = view_routes.ViewStore(api.services)
    assert not vs.swap(("ns",), "v", "file:///stale.metadata.json", "x", "{}")
    # a competing commit lands between our read and our swap: the server retries on the fresh metadata
    real_swap, raced = view_routes.ViewStore.swap, []

    def racing_swap(self, ns, name, expected, location, text):  # type: ignore[no-untyped-def]
        if not raced:
            raced.append(1)
            api.commit("v", [{"action": "set-properties", "updates": {"winner": "other"}}], expect=200)
        return real_swap(self, ns, name, expected, location, text)

    monkeypatch.setattr(view_routes.ViewStore, "swap", racing_swap)
    res = api.commit("v", [{"action": "set-properties", "updates": {"mine": "1"}}], expect=200).json()
    assert res["metadata"]["properties"]["winner"] == "other" and res["metadata"]["properties"]["mine"] == "1"
    assert Path(res["metadata-location"]).name.startswith("00002-")
    # a commit that never wins fails with CommitFailedException and leaves no orphan files
    monkeypatch.setattr(view_routes.ViewStore, "swap", lambda *a: False)
    api.error(
        "POST",
        f"{VIEWS}/v",
        409,
        "CommitFailedException",
        {"updates": [{"action": "set-properties", "updates": {"z": "1"}}]},
    )
    folder = local_path(created["metadata-location"]).parent
    assert len(list(folder.iterdir())) == 3


# ---------------------------------------------------------------- rename / drop
def test_rename(api: Api) -> None:
    created = api.create("v")
    api.create("taken")
    api.services.catalog.create_table(("ns", "tbl"), Schema(NestedField(1, "s", StringType(), required=False)))
    rename = f"{P}/views/rename"

    def body(src: tuple, dst: tuple) -> dict:
        return {
            "source": {"namespace": list(src[:-1]), "name": src[-1]},
            "destination": {"namespace": list(dst[:-1]), "name": dst[-1]},
        }

    api.error("POST", rename, 404, "NoSuchViewException", body(("ns", "missing"), ("ns", "x")))
    api.error("POST", rename, 404, "NoSuchNamespaceException", body(("ns", "v"), ("missing", "x")))
    api.error("POST", rename, 409, "AlreadyExistsException", body(("ns", "v"), ("ns", "taken")))
    api.error("POST", rename, 409, "AlreadyExistsException", body(("ns", "v"), ("ns", "tbl")))
    api.error("POST", rename, 409, "AlreadyExistsException", body(("ns", "v"), ("ns", "v")))
    api.call("POST", rename, body=body(("ns", "v"), ("ns", "w")), expect=204)
    api.error("GET", f"{VIEWS}/v", 404, "NoSuchViewException")
    assert api.ok("GET", f"{VIEWS}/w") == created
    api.call("POST", rename, body=body(("ns", "w"), ("other", "moved")), expect=204)
    assert api.ok("GET", f"{P}/namespaces/other/views/moved")["metadata"] == created["metadata"]
    assert [i["name"] for i in api.ok("GET", VIEWS)["identifiers"]] == ["taken"]


def test_drop(api: Api) -> None:
    api.create("v")
    api.call("DELETE", f"{VIEWS}/v", expect=204)
    api.error("DELETE", f"{VIEWS}/v", 404, "NoSuchViewException")
    api.call("HEAD", f"{VIEWS}/v", expect=404)
    api.create("v")  # the name is free again
    api.error("DELETE", f"{P}/namespaces/missing/views/v", 404, "NoSuchViewException")


# ---------------------------------------------------------------- authorization
def test_forbidden_everywhere_reveals_nothing(api: Api) -> None:
    created = api.create("v")
    uuid, location = created["metadata"]["view-uuid"], created["metadata"]["location"]
    rename = {"source": {"namespace": ["ns"], "name": "v"}, "destination": {"namespace": ["ns"], "name": "w"}}
    calls = [
        ("GET", VIEWS, None),
        ("POST", VIEWS, create_body("new")),
        ("GET", f"{VIEWS}/v", None),
        ("POST", f"{VIEWS}/v", {"updates": []}),
        ("DELETE", f"{VIEWS}/v", None),
        ("POST", f"{P}/views/rename", rename),
        # nonexistent things answer 403 too, never 404
        ("GET", f"{P}/namespaces/missing/views", None),
        ("GET", f"{VIEWS}/missing", None),
        ("POST", f"{P}/namespaces/missing/views", create_body("new")),
        ("DELETE", f"{VIEWS}/missing", None),
    ]
    for method, path, body in calls:
        r = api.call(method, path, "nobody", body, expect=403)
        assert r.json()["error"]["type"] == "ForbiddenException"
        assert uuid not in r.text and location not in r.text and "metadata" not in r.text
    api.call("HEAD", f"{VIEWS}/v", "nobody", expect=403)
    api.call("HEAD", f"{VIEWS}/missing", "nobody", expect=403)
    api.call("GET", f"{VIEWS}/v", "", expect=401)
    denied = [row for row in audit_rows(api, "nobody") if row[2] == "deny"]
    assert len(denied) == len(calls) + 2
    assert ("load_view", "view ns.v", "deny") in denied
    assert api.ok("GET", f"{VIEWS}/v") == created  # nothing changed


def test_privileges_per_endpoint(api: Api) -> None:
    d = api.services.directory
    api.create("v")
    d.create_role("readers", ["alice"])
    d.grant("readers", "VIEW_READ", "view ns.v")
    api.ok("GET", f"{VIEWS}/v", who="alice")
    api.call("HEAD", f"{VIEWS}/v", "alice", expect=204)
    api.call("GET", VIEWS, "alice", expect=403)  # VIEW_READ does not imply VIEW_LIST
    api.call("POST", f"{VIEWS}/v", "alice", {"updates": []}, expect=403)
    api.call("DELETE", f"{VIEWS}/v", "alice", expect=403)
    d.grant("readers", "VIEW_LIST", "namespace ns")
    d.grant("readers", "VIEW_WRITE_PROPERTIES", "view ns.v")
    assert api.ok("GET", VIEWS, who="alice")["identifiers"]
    api.call(
        "POST", f"{VIEWS}/v", "alice", {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}, expect=200
    )
    api.call("POST", VIEWS, "alice", create_body("new"), expect=403)
    # rename needs VIEW_DROP on the source and VIEW_CREATE on the destination namespace
    rename = {"source": {"namespace": ["ns"], "name": "v"}, "destination": {"namespace": ["other"], "name": "v"}}
    d.grant("readers", "VIEW_DROP", "view ns.v")
    api.call("POST", f"{P}/views/rename", "alice", rename, expect=403)
    d.grant("readers", "VIEW_CREATE", "namespace other")
    api.call("POST", f"{P}/views/rename", "alice", rename, expect=204)
    rows = audit_rows(api, "alice")
    assert ("rename_view", "namespace other", "allow") in rows
    assert ("load_view", "view ns.v", "issued") in rows and ("replace_view", "view ns.v", "issued") in rows


# ---------------------------------------------------------------- malformed input
@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[]",
        b"null",
        b"42",
        b'{"name": "x"}',
        json.dumps(create_body("x", schema={"type": "struct", "fields": "nope"})).encode(),
        json.dumps(
            create_body(
                "x",
                schema={
                    "type": "struct",
                    "fields": [{"id": 1, "name": "a", "type": "no-such-type", "required": False}],
                },
            )
        ).encode(),
        json.dumps(create_body("x", schema={**schema_json((1, "a", "long")), "identifier-field-ids": [9]})).encode(),
        json.dumps(
            create_body("x", **{"view-version": {**version_json(), "representations": [{"type": "other"}]}})
        ).encode(),
        json.dumps(create_body("x", **{"view-version": {**version_json(), "default-namespace": "ns"}})).encode(),
        json.dumps(create_body("x", properties={"a": {"b": 1}})).encode(),
        json.dumps(create_body("")).encode(),
        json.dumps(create_body("a/b")).encode(),
        json.dumps(create_body(["x"])).encode(),
    ],
    ids=[  # named, not derived from the bodies: their timestamps differ from one collection to the next (xdist)
        *("empty", "not-json", "array", "null", "number", "name-only", "fields-not-a-list", "unknown-type"),
        *("unknown-identifier-field", "unknown-representation", "namespace-not-a-list", "nested-property"),
        *("empty-name", "slash-in-name", "name-a-list"),
    ],
)
def test_malformed_create(api: Api, raw: bytes) -> None:
    r = api.call("POST", VIEWS, raw=raw, expect=400)
    assert r.json()["error"]["type"] == "BadRequestException"


@pytest.mark.parametrize(
    "path,raw",
    [
        (f"{VIEWS}/v", b""),
        (f"{VIEWS}/v", b"{"),
        (f"{VIEWS}/v", b'{"updates": {}}'),
        (f"{VIEWS}/v", b'{"updates": [1]}'),
        (f"{VIEWS}/v", b'{"updates": [{"action": "add-view-version", "view-version": {}}]}'),
        (f"{VIEWS}/v", b'{"updates": [{"action": "set-current-view-version", "view-version-id": "x"}]}'),
        (f"{VIEWS}/v", b'{"updates": [], "requirements": [{"type": "assert-view-uuid"}]}'),
        (f"{VIEWS}/v", b'{"updates": [], "identifier": {"namespace": [], "name": "v"}}'),
        (f"{P}/views/rename", b"{}"),
        (f"{P}/views/rename", b'{"source": {"namespace": ["ns"], "name": "v"}}'),
        (
            f"{P}/views/rename",
            b'{"source": {"namespace": [], "name": "v"}, "destination": {"namespace": ["ns"], "name": "w"}}',
        ),
        (
            f"{P}/views/rename",
            b'{"source": {"namespace": ["ns"], "name": "v"}, "destination": {"namespace": ["a/b"], "name": "w"}}',
        ),
    ],
)
def test_malformed_commit_and_rename(api: Api, path: str, raw: bytes) -> None:
    api.create("v")
    r = api.call("POST", path, raw=raw, expect=400)
    assert r.json()["error"]["type"] == "BadRequestException"


# ---------------------------------------------------------------- a real client over HTTP
def test_pyiceberg_rest_client(api: Api) -> None:
    import uvicorn
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.view.metadata import (
        SQLViewRepresentation,
        ViewRepresentation,
        ViewVersion,
    )

    app = api.client.app
    app.state.endpoints = [
        "GET /v1/{prefix}/namespaces",
        "POST /v1/{prefix}/namespaces",
        "GET /v1/{prefix}/namespaces/{namespace}",
        "GET /v1/{prefix}/namespaces/{namespace}/views",
        "POST /v1/{prefix}/namespaces/{namespace}/views",
        "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "POST /v1/{prefix}/views/rename",
    ]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 10
        while not server.started and time.time() < deadline:
            time.sleep(0.02)
        cat = RestCatalog("rest", uri=f"http://127.0.0.1:{port}", token="admin", warehouse="lakesession")
        version = ViewVersion(
            version_id=1,
            schema_id=0,
            summary={},
            default_namespace=("ns",),
            representations=[
                ViewRepresentation(SQLViewRepresentation(type="sql", sql="SELECT 1 AS id", dialect="spark"))
            ],
        )
        view = cat.create_view(("ns", "pv"), Schema(NestedField(1, "id", LongType(), required=False)), version)
        assert view.metadata.current_version_id == 1
        assert ("ns", "pv") in cat.list_views("ns")
        assert cat.view_exists(("ns", "pv")) and not cat.view_exists(("ns", "nope"))
        assert cat.load_view(("ns", "pv")).metadata == view.metadata
        cat.drop_view(("ns", "pv"))
        assert not cat.view_exists(("ns", "pv"))
    finally:
        server.should_exit = True
        thread.join(timeout=10)
