"""Table commits whose metadata Iceberg Java cannot read (issue #32, round 4, item 1), over real HTTP.

Anyone with TABLE_WRITE_DATA could commit metadata that pyiceberg and the catalog read back while Iceberg
Java 1.12's ``TableMetadataParser`` refuses it, so Spark, Trino and Flink could no longer load the table:
a ``next-row-id`` past a long (``first-row-id`` 2^63-1 + 10 rows, or ``first-row-id`` 2^70), a long
field with ``initial-default: "notalong"``, a snapshot older than the metadata log. Each is now a 400
naming the field, and the table stays as it was (the next honest append still commits). The differential
proof that the catalog writes nothing Java refuses is tests/security/test_metadata_differential.py.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from lakesession.reference import ReferenceCatalog
from tests.support import SCHEMA, shared_namespace
from tests.support import bad_request as refused

P = "/v1/lakesession"
NS = "attack_metadata"


@pytest.fixture(scope="module")
def etl(catalog: ReferenceCatalog, http: httpx.Client) -> dict[str, str]:
    return shared_namespace(catalog, http, NS)  # TABLE_WRITE_DATA (and more) on the catalog


def table(http: httpx.Client, etl: dict[str, str], name: str, version: str) -> dict[str, Any]:
    http.delete(f"{P}/namespaces/{NS}/tables/{name}", headers=etl)
    body = {"name": name, "schema": SCHEMA, "properties": {"format-version": version}}
    r = http.post(f"{P}/namespaces/{NS}/tables", json=body, headers=etl)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def commit(http: httpx.Client, etl: dict[str, str], name: str, *updates: dict[str, Any]) -> httpx.Response:
    body = {"requirements": [], "updates": list(updates)}
    return http.post(f"{P}/namespaces/{NS}/tables/{name}", json=body, headers=etl)


def append(sid: int, first_row_id: int | None = None, added_rows: int | None = None, ts: int | None = None) -> dict:  # type: ignore[type-arg]
    snap: dict[str, Any] = {
        "snapshot-id": sid,
        "sequence-number": 1,
        "timestamp-ms": int(time.time() * 1000) if ts is None else ts,
        "manifest-list": f"file:///nowhere/snap-{sid}.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    if first_row_id is not None:
        snap["first-row-id"], snap["added-rows"] = first_row_id, added_rows
    return {"action": "add-snapshot", "snapshot": snap}


def unchanged(http: httpx.Client, etl: dict[str, str], name: str, before: dict[str, Any]) -> None:
    r = http.get(f"{P}/namespaces/{NS}/tables/{name}", headers=etl)
    assert r.status_code == 200, r.text
    assert r.json()["metadata-location"] == before["metadata-location"]


@pytest.mark.parametrize(
    ("first_row_id", "words"),
    [
        (
            2**63 - 1,
            [
                "next-row-id would be 9223372036854775817, beyond a long",
                "first-row-id 9223372036854775807 + added-rows 10",
            ],
        ),
        (2**70, ["next-row-id would be 1180591620717411303434, beyond a long", "first-row-id 1180591620717411303424"]),
    ],
    ids=["long-max-plus-rows", "2^70"],
)
def test_row_id_overflow_is_400_and_later_appends_still_commit(
    http: httpx.Client, etl: dict[str, str], first_row_id: int, words: list[str]
) -> None:
    name = f"overflow_{first_row_id.bit_length()}"
    before = table(http, etl, name, "3")
    refused(commit(http, etl, name, append(1, first_row_id, 10)), *words)
    unchanged(http, etl, name, before)
    r = commit(http, etl, name, append(2, 0, 10))  # the owner's next append is not locked out
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["next-row-id"] == 10


def test_long_field_with_a_string_initial_default_is_400(http: httpx.Client, etl: dict[str, str]) -> None:
    before = table(http, etl, "bad_default", "3")
    field = {"id": 2, "name": "x", "type": "long", "required": False, "initial-default": "notalong"}
    schema = {**SCHEMA, "schema-id": 1, "fields": [*SCHEMA["fields"], field]}
    message = refused(commit(http, etl, "bad_default", {"action": "add-schema", "schema": schema}), "initial-default")
    assert "'x'" in message and "'notalong'" in message and "long" in message
    unchanged(http, etl, "bad_default", before)
    write = {**field, "initial-default": None, "write-default": 2**63}  # one past a long
    schema = {**SCHEMA, "schema-id": 1, "fields": [*SCHEMA["fields"], write]}
    refused(commit(http, etl, "bad_default", {"action": "add-schema", "schema": schema}), "write-default", "'x'")
    unchanged(http, etl, "bad_default", before)


@pytest.mark.parametrize("version", ["1", "2", "3"])
def test_snapshot_older_than_the_metadata_log_is_400(http: httpx.Client, etl: dict[str, str], version: str) -> None:
    name = f"old_snapshot_v{version}"
    before = table(http, etl, name, version)
    lineage = (0, 1) if version == "3" else (None, None)
    old = int(time.time() * 1000) - 10 * 60_000  # ten minutes before the table's creation
    r = commit(http, etl, name, append(1, *lineage, ts=old))
    refused(r, "last-updated-ms", "before the latest metadata log entry")
    unchanged(http, etl, name, before)
    skewed = int(time.time() * 1000) - 30_000  # within the minute of clock skew Iceberg Java tolerates
    assert commit(http, etl, name, append(2, *lineage, ts=skewed)).status_code == 200
