"""View metadata Iceberg Java cannot read (issue #40, V13), attacked over real HTTP.

Anyone allowed to create or replace a view could make the catalog write view metadata that pyiceberg and
the catalog read back while Iceberg Java 1.12's ``ViewMetadataParser`` refuses it, so Spark, Trino and
Flink could no longer load the view (nor anything defined over it): a ``timestamp-ms`` of 2^64, a long
field whose ``initial-default`` is ``"notalong"``, a field id of 2^40, a version id past an int, a
default namespace holding a null byte, duplicate field ids. Each is now a 400 naming the field, and the
view stays as it was. ``test_java_refuses_what_the_old_catalog_wrote`` (slow) rebuilds each file exactly
as the catalog used to write it and shows Iceberg Java's parser refusing it; the differential proof that
the catalog writes nothing Java refuses is tests/security/test_view_differential.py.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.view.metadata import ViewMetadata

from lakesession.reference import ReferenceCatalog
from lakesession.reference.errors import BadRequest
from lakesession.reference.viewmeta import CommitViewRequest, apply_commit, metadata_json
from tests._icebergjava import java_parser
from tests.support import bad_request as refused
from tests.support import shared_namespace

P = "/v1/lakesession"
NS = "attack_view_metadata"
NOW = int(time.time() * 1000)


def schema(*fields: dict[str, Any], schema_id: int = 0) -> dict[str, Any]:
    return {"type": "struct", "schema-id": schema_id, "fields": list(fields) or [field(1, "id")]}


def field(fid: int, name: str, type_: str = "long", **extra: Any) -> dict[str, Any]:
    return {"id": fid, "name": name, "type": type_, "required": False, **extra}


def version(sql: str = "SELECT 1 AS id", schema_id: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "version-id": 1,
        "timestamp-ms": NOW,
        "schema-id": schema_id,
        "summary": {"engine-name": "spark"},
        "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
        "default-namespace": [NS],
        **extra,
    }


def add_version(**extra: Any) -> dict[str, Any]:
    return {"action": "add-view-version", "view-version": version(f"SELECT {len(str(extra))} AS id", **extra)}


def add_schema(*fields: dict[str, Any], schema_id: int = 1) -> dict[str, Any]:
    return {"action": "add-schema", "schema": schema(*fields, schema_id=schema_id)}


CURRENT = {"action": "set-current-view-version", "view-version-id": -1}
ON_LAST_SCHEMA = {"action": "add-view-version", "view-version": version("SELECT 2 AS id", schema_id=-1)}

# commits an attacker sends to an existing view: (updates, words the 400 must name)
COMMITS: dict[str, tuple[list[dict[str, Any]], tuple[str, ...]]] = {
    "timestamp-ms 2^64": ([add_version(**{"timestamp-ms": 2**64}), CURRENT], ("timestamp-ms", str(2**64))),
    "timestamp-ms 2^64, not made current": ([add_version(**{"timestamp-ms": 2**64})], ("timestamp-ms",)),
    "long default 'notalong'": (
        [add_schema(field(1, "id", **{"initial-default": "notalong"})), ON_LAST_SCHEMA, CURRENT],
        ("initial-default", "notalong"),
    ),
    "write-default 'notalong'": (
        [add_schema(field(1, "id"), field(2, "x", **{"write-default": "notalong"})), ON_LAST_SCHEMA, CURRENT],
        ("write-default", "notalong"),
    ),
    "field id 2^40": ([add_schema(field(2**40, "id")), ON_LAST_SCHEMA, CURRENT], ("id", str(2**40))),
    # found by tests/security/test_view_differential.py: Java reads a double default only from 0.0, never 0
    "double default 0": (
        [add_schema(field(1, "id"), field(2, "x", "double", **{"write-default": 0})), ON_LAST_SCHEMA, CURRENT],
        ("write-default", "not a double value"),
    ),
    "list element id 2^31": (
        [
            add_schema(
                field(1, "xs", {"type": "list", "element-id": 2**31, "element": "int", "element-required": False})
            )
        ],
        ("element-id", str(2**31)),
    ),
    "duplicate field ids": ([add_schema(field(1, "id"), field(1, "y", "string")), ON_LAST_SCHEMA], ("field id",)),
    "current version pointing nowhere": ([{"action": "set-current-view-version", "view-version-id": 99}], ("99",)),
    "current version id 2^31": (
        [{"action": "set-current-view-version", "view-version-id": 2**31}],
        ("view-version-id", str(2**31)),
    ),
    "version with unknown schema": ([add_version(**{"schema-id": 7}), CURRENT], ("schema", "7")),
    "schema id 2^31": ([add_schema(field(1, "id"), field(2, "y"), schema_id=2**31)], ("schema-id", str(2**31))),
    "version id 2^31": ([add_version(**{"version-id": 2**31}), CURRENT], ("version-id", str(2**31))),
    "null byte in default-namespace": (
        [add_version(**{"default-namespace": ["a\x00b"]}), CURRENT],
        ("default-namespace", "null"),
    ),
    "format-version 2": ([{"action": "upgrade-format-version", "format-version": 2}], ("format version",)),
    "history size past an int": (
        [{"action": "set-properties", "updates": {"version.history.num-entries": "99999999999"}}],
        ("version.history.num-entries",),
    ),
    "timestamp-ms as a float": ([add_version(**{"timestamp-ms": 1.0}), CURRENT], ("timestamp-ms",)),
}

# refused by Iceberg Java's REST request parser or its builder, not in the file the old catalog wrote: the
# 2^31 schema id was renumbered, the float read as an int, and the property parsed by Python's int()
REQUEST_ONLY = {"schema id 2^31", "timestamp-ms as a float", "history size past an int"}

# view creations: (create body overrides, words)
CREATES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "timestamp-ms 2^64": ({"view-version": version(**{"timestamp-ms": 2**64})}, ("timestamp-ms",)),
    "long default 'notalong'": (
        {"schema": schema(field(1, "id", **{"initial-default": "notalong"}))},
        ("initial-default", "notalong"),
    ),
    "field id 2^40": ({"schema": schema(field(2**40, "id"))}, ("id", str(2**40))),
    "duplicate field ids": ({"schema": schema(field(1, "id"), field(1, "y", "string"))}, ("field id",)),
    "null byte in default-namespace": (
        {"view-version": version(**{"default-namespace": ["a\x00b"]})},
        ("default-namespace",),
    ),
    "schema id 2^31": ({"schema": schema(schema_id=2**31)}, ("schema-id",)),
}


@pytest.fixture(scope="module")
def owner(catalog: ReferenceCatalog, http: httpx.Client) -> dict[str, str]:
    return shared_namespace(catalog, http, NS)  # CATALOG_MANAGE_CONTENT: creates and replaces views


def create(http: httpx.Client, owner: dict[str, str], name: str, **overrides: Any) -> httpx.Response:
    http.delete(f"{P}/namespaces/{NS}/views/{name}", headers=owner)
    body = {"name": name, "schema": schema(), "view-version": version(), "properties": {}, **overrides}
    return http.post(f"{P}/namespaces/{NS}/views", json=body, headers=owner)


def commit(http: httpx.Client, owner: dict[str, str], name: str, updates: list[dict[str, Any]]) -> httpx.Response:
    return http.post(f"{P}/namespaces/{NS}/views/{name}", json={"requirements": [], "updates": updates}, headers=owner)


def slug(case: str) -> str:
    return "v_" + "".join(c if c.isalnum() else "_" for c in case)[:40]


@pytest.mark.parametrize("case", COMMITS)
def test_a_commit_java_cannot_read_is_refused_and_the_view_unchanged(
    case: str, http: httpx.Client, owner: dict[str, str]
) -> None:
    name = slug(case)
    r = create(http, owner, name)
    assert r.status_code == 200, r.text
    before = r.json()
    updates, words = COMMITS[case]
    refused(commit(http, owner, name, updates), *words)
    after = http.get(f"{P}/namespaces/{NS}/views/{name}", headers=owner)
    assert after.status_code == 200, after.text
    assert after.json()["metadata-location"] == before["metadata-location"]
    assert after.json()["metadata"] == before["metadata"]
    # the view still takes an honest replace
    honest = commit(
        http, owner, name, [{"action": "add-view-version", "view-version": version("SELECT 42 AS id")}, CURRENT]
    )
    assert honest.status_code == 200, honest.text


@pytest.mark.parametrize("case", CREATES)
def test_a_view_java_cannot_read_is_never_created(case: str, http: httpx.Client, owner: dict[str, str]) -> None:
    name = slug(case)
    overrides, words = CREATES[case]
    refused(create(http, owner, name, **overrides), *words)
    assert http.get(f"{P}/namespaces/{NS}/views/{name}", headers=owner).status_code == 404


def test_version_log_out_of_order_is_what_java_accepts(http: httpx.Client, owner: dict[str, str]) -> None:
    """A version made current with an old ``timestamp-ms`` puts the version log out of order. Iceberg Java's
    ``ViewMetadata`` (unlike ``TableMetadata``) never checks the order, so the catalog accepts it as Java does."""
    name = "v_log_order"
    assert create(http, owner, name).status_code == 200
    r = commit(http, owner, name, [add_version(**{"timestamp-ms": 0}), CURRENT])
    assert r.status_code == 200, r.text
    log = r.json()["metadata"]["version-log"]
    assert [e["timestamp-ms"] for e in log] == [NOW, 0]


# ------------------------------------------------------------------ the Java proof (slow: one JVM)
def _old_catalog_file(base: dict[str, Any], case: str) -> dict[str, Any] | None:
    """The metadata the catalog wrote for ``case`` before this fix: its builder's output, unchecked
    (None when the builder itself refused, as it already did)."""
    try:
        request = CommitViewRequest.model_validate({"requirements": [], "updates": COMMITS[case][0]})
        metadata, _ = apply_commit(ViewMetadata.model_validate(base), request)
    except (BadRequest, ValueError):
        return None
    return json.loads(metadata_json(metadata))  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def java() -> Iterator[Callable[[Path], str | None]]:
    with java_parser("view") as parse:
        yield parse


@pytest.mark.slow
def test_java_refuses_what_the_old_catalog_wrote(
    http: httpx.Client, owner: dict[str, str], java: Callable[[Path], str | None], tmp_path: Path
) -> None:
    r = create(http, owner, "v_java_base")
    assert r.status_code == 200, r.text
    base = r.json()["metadata"]
    assert java(Path(r.json()["metadata-location"].removeprefix("file://"))) is None  # the honest view reads
    written = {
        case: doc for case in COMMITS if case not in REQUEST_ONLY and (doc := _old_catalog_file(base, case)) is not None
    }
    # what the old builder passed and wrote: (V13's three and the rest it let through)
    for case in (
        "timestamp-ms 2^64",
        "long default 'notalong'",
        "field id 2^40",
        "version id 2^31",
        "double default 0",
    ):
        assert case in written, case
    for case in ("null byte in default-namespace", "duplicate field ids"):
        created = copy.deepcopy(base)
        overrides = CREATES[case][0]
        if "schema" in overrides:
            created["schemas"] = [overrides["schema"]]
        else:
            created["versions"][0]["default-namespace"] = overrides["view-version"]["default-namespace"]
        written[f"create: {case}"] = created
    answers = {}
    for i, (case, doc) in enumerate(written.items()):
        path = tmp_path / f"{i}.metadata.json"
        path.write_text(json.dumps(doc))
        answers[case] = java(path)
    accepted = [case for case, error in answers.items() if error is None]
    assert accepted == [], f"Iceberg Java reads these, so refusing them is not needed: {accepted}"
