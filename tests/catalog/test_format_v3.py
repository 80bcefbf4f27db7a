"""Table format v3 in the reference catalog, over real HTTP (the shared catalog: every answer is checked
against the REST spec at the end of the session).

What a v3 client sends and expects: creates at v3 (``format-version`` property, stage-create, create
through a commit as Iceberg Java's CTAS does), upgrades from v1/v2, row lineage on every snapshot
(``first-row-id`` never behind the table's ``next-row-id``, which always moves past the rows assigned),
default values and nanosecond timestamps (ported from pyiceberg 0.12's own v3 integration tests), and
400s for downgrades, unknown versions and v3-only schema parts on v1/v2 tables. Spark writing v3
(deletion vectors) is in tests/client/test_spark_v3.py.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, time
from decimal import Decimal
from time import sleep
from time import time as wall_clock
from typing import Any

import httpx
import pytest
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io import load_file_io
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from lakesession.reference import ReferenceCatalog, formatversion
from tests.conftest import rest_catalog
from tests.support import SCHEMA as SCHEMA_JSON
from tests.support import bad_request, shared_namespace

P = "/v1/lakesession"
NS = "fv3"


@pytest.fixture(scope="module")
def etl(catalog: ReferenceCatalog, http: httpx.Client) -> dict[str, str]:
    return shared_namespace(catalog, http, NS)


def create(http: httpx.Client, etl: dict[str, str], name: str, version: str | None, **extra: Any) -> httpx.Response:
    http.delete(f"{P}/namespaces/{NS}/tables/{name}", headers=etl)
    props = {} if version is None else {"format-version": version}
    body = {"name": name, "schema": SCHEMA_JSON, "properties": props, **extra}
    return http.post(f"{P}/namespaces/{NS}/tables", json=body, headers=etl)


def commit(http: httpx.Client, etl: dict[str, str], name: str, *updates: dict[str, Any], **body: Any) -> httpx.Response:
    payload = {"requirements": [], "updates": list(updates), **body}
    return http.post(f"{P}/namespaces/{NS}/tables/{name}", json=payload, headers=etl)


def snapshot(sid: int, seq: int, first_row_id: int | None, added_rows: int | None, parent: int | None = None) -> dict:  # type: ignore[type-arg]
    snap: dict[str, Any] = {
        "snapshot-id": sid,
        "sequence-number": seq,
        "timestamp-ms": int(wall_clock() * 1000) + sid,  # never before the table's metadata log (Iceberg Java refuses)
        "manifest-list": f"file:///nowhere/snap-{sid}.avro",  # the catalog never reads it
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    if parent is not None:
        snap["parent-snapshot-id"] = parent
    if first_row_id is not None:
        snap["first-row-id"] = first_row_id
    if added_rows is not None:
        snap["added-rows"] = added_rows
    return {"action": "add-snapshot", "snapshot": snap}


def drop_if_exists(cat: Any, name: str) -> None:
    """Drop ``NS.name`` if an earlier run left it (the shared catalog outlives a module)."""
    try:
        cat.drop_table(f"{NS}.{name}")
    except NoSuchTableError:
        pass


def fresh(catalog: ReferenceCatalog, name: str) -> Any:
    """etl's pyiceberg catalog, with no ``NS.name`` table in it yet: pyiceberg's own tests start this way."""
    cat = rest_catalog(catalog, "etl")
    drop_if_exists(cat, name)
    return cat


def stored(catalog: ReferenceCatalog, metadata_location: str) -> dict[str, Any]:
    """The metadata file as written to storage (not the catalog's answer)."""
    io = load_file_io({}, metadata_location)
    with io.new_input(metadata_location).open() as f:
        return json.loads(f.read())  # type: ignore[no-any-return]


# ---------------------------------------------------------------- create and upgrade
def test_create_at_v3_writes_v3_metadata_with_row_lineage(catalog: ReferenceCatalog, http: httpx.Client, etl) -> None:  # type: ignore[no-untyped-def]
    r = create(http, etl, "created", "3")
    assert r.status_code == 200, r.text
    md = r.json()["metadata"]
    assert md["format-version"] == 3 and md["next-row-id"] == 0
    assert "format-version" not in md.get("properties", {})  # a reserved property: the version is the field
    on_disk = stored(catalog, r.json()["metadata-location"])
    assert on_disk["format-version"] == 3 and on_disk["next-row-id"] == 0
    loaded = http.get(f"{P}/namespaces/{NS}/tables/created", headers=etl).json()["metadata"]
    assert loaded["format-version"] == 3 and loaded["next-row-id"] == 0


def test_stage_create_then_create_commit_at_v3(http: httpx.Client, etl) -> None:  # type: ignore[no-untyped-def]
    """Iceberg Java's CTAS: stage-create, then one commit with assert-create carrying the whole table."""
    staged = create(http, etl, "ctas", "3", **{"stage-create": True})
    assert staged.status_code == 200, staged.text
    md = staged.json()["metadata"]
    assert md["format-version"] == 3 and md["next-row-id"] == 0
    updates = [
        {"action": "assign-uuid", "uuid": md["table-uuid"]},
        {"action": "upgrade-format-version", "format-version": 3},
        {"action": "add-schema", "schema": SCHEMA_JSON, "last-column-id": 1},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": md["location"]},
        {"action": "set-properties", "updates": {"owner": "etl"}},
        snapshot(1, 1, 0, 3),
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1},
    ]
    r = commit(http, etl, "ctas", *updates, requirements=[{"type": "assert-create"}])
    assert r.status_code == 200, r.text
    md = r.json()["metadata"]
    assert md["format-version"] == 3 and md["next-row-id"] == 3 and md["current-snapshot-id"] == 1
    assert md["snapshots"][0]["first-row-id"] == 0 and md["snapshots"][0]["added-rows"] == 3


@pytest.mark.parametrize("start", ["1", "2"])
def test_upgrade_to_v3_keeps_snapshots_and_starts_row_ids_at_zero(
    catalog: ReferenceCatalog, http: httpx.Client, etl, start: str
) -> None:  # type: ignore[no-untyped-def]
    name = f"up{start}"
    assert create(http, etl, name, start).status_code == 200
    old = snapshot(1, 0 if start == "1" else 1, None, None)
    old["snapshot"].pop("sequence-number") if start == "1" else None
    assert commit(http, etl, name, old).status_code == 200
    r = commit(http, etl, name, {"action": "upgrade-format-version", "format-version": 3})
    assert r.status_code == 200, r.text
    md = r.json()["metadata"]
    assert md["format-version"] == 3 and md["next-row-id"] == 0 and [s["snapshot-id"] for s in md["snapshots"]] == [1]
    assert stored(catalog, r.json()["metadata-location"])["next-row-id"] == 0
    r = commit(http, etl, name, snapshot(2, 2, 0, 5, parent=1))
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["next-row-id"] == 5


def test_pyiceberg_upgrade_and_downgrade(catalog: ReferenceCatalog) -> None:
    """pyiceberg 0.12's test_upgrade_table_version, through this catalog (its client refuses v3 itself)."""
    cat = fresh(catalog, "pyup")
    table = cat.create_table(f"{NS}.pyup", Schema(NestedField(1, "id", LongType())), properties={"format-version": "1"})
    with table.transaction() as tx:
        tx.upgrade_table_version(format_version=1)
    assert table.format_version == 1
    with table.transaction() as tx:
        tx.upgrade_table_version(format_version=2)
    assert table.format_version == 2
    with pytest.raises(ValueError, match="Cannot downgrade v2 table to v1"):
        with table.transaction() as tx:
            tx.upgrade_table_version(format_version=1)


@pytest.mark.parametrize(
    "updates, words",
    [
        ([{"action": "upgrade-format-version", "format-version": 2}], ("downgrade", "v3", "v2")),
        ([{"action": "upgrade-format-version", "format-version": 1}], ("downgrade",)),
        ([{"action": "upgrade-format-version", "format-version": 4}], ("format-version", "4")),
        ([{"action": "upgrade-format-version", "format-version": 0}], ("format-version",)),
        ([{"action": "set-properties", "updates": {"format-version": "9"}}], ("format-version",)),
    ],
    ids=["to-v2", "to-v1", "to-v4", "to-v0", "property-v9"],
)
def test_downgrades_and_unknown_versions_are_400(http: httpx.Client, etl, updates, words) -> None:  # type: ignore[no-untyped-def]
    assert create(http, etl, "down", "3").status_code == 200
    bad_request(commit(http, etl, "down", *updates), *words)
    md = http.get(f"{P}/namespaces/{NS}/tables/down", headers=etl).json()["metadata"]
    assert md["format-version"] == 3  # unchanged


@pytest.mark.parametrize("version", ["4", "x", "-1", " ", "3.0"])
def test_create_with_unknown_version_is_400(http: httpx.Client, etl, version: str) -> None:  # type: ignore[no-untyped-def]
    bad_request(create(http, etl, "unknown", version), "format-version")
    assert http.head(f"{P}/namespaces/{NS}/tables/unknown", headers=etl).status_code == 404


def test_register_v3_metadata(catalog: ReferenceCatalog, http: httpx.Client, etl) -> None:  # type: ignore[no-untyped-def]
    r = create(http, etl, "reg", "3")
    r = commit(http, etl, "reg", snapshot(1, 1, 0, 7))
    assert r.status_code == 200, r.text
    location = r.json()["metadata-location"]
    assert http.delete(f"{P}/namespaces/{NS}/tables/reg", headers=etl).status_code == 204  # files kept
    body = {"name": "reg", "metadata-location": location}
    r = http.post(f"{P}/namespaces/{NS}/register", json=body, headers=etl)
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["format-version"] == 3 and r.json()["metadata"]["next-row-id"] == 7


# ---------------------------------------------------------------- row lineage
def test_row_lineage_is_validated_and_assigned(catalog: ReferenceCatalog, http: httpx.Client, etl) -> None:  # type: ignore[no-untyped-def]
    """A writer whose first-row-id lags the table's next-row-id would give two rows one ``_row_id``."""
    assert create(http, etl, "lineage", "3").status_code == 200
    bad_request(commit(http, etl, "lineage", snapshot(1, 1, None, 10)), "first-row-id")
    bad_request(commit(http, etl, "lineage", snapshot(1, 1, 0, None)), "added-rows")
    bad_request(commit(http, etl, "lineage", snapshot(1, 1, 0, -1)), "added-rows")
    r = commit(http, etl, "lineage", snapshot(1, 1, 0, 10))
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["next-row-id"] == 10
    # the second writer read the table before the first committed: its row ids 0..9 are taken
    stale = commit(http, etl, "lineage", snapshot(2, 2, 0, 4, parent=1))
    bad_request(stale, "first-row-id is behind table next-row-id", "0 < 10")
    bad_request(commit(http, etl, "lineage", snapshot(3, 5, 5, 4, parent=1)), "first-row-id is behind")
    # a snapshot that assigns no rows (a delete) keeps next-row-id
    r = commit(http, etl, "lineage", snapshot(4, 2, 10, 0, parent=1))
    assert r.status_code == 200 and r.json()["metadata"]["next-row-id"] == 10, r.text
    # ids past next-row-id: next-row-id is "higher than all assigned row IDs"
    r = commit(http, etl, "lineage", snapshot(5, 3, 20, 5, parent=4))
    assert r.status_code == 200, r.text
    md = r.json()["metadata"]
    assert md["next-row-id"] == 25
    assert stored(catalog, r.json()["metadata-location"])["next-row-id"] == 25
    # sequence numbers still only grow (pyiceberg checks this for v2 only)
    bad_request(commit(http, etl, "lineage", snapshot(6, 3, 25, 1, parent=5)), "sequence number")
    # the failures changed nothing
    md = http.get(f"{P}/namespaces/{NS}/tables/lineage", headers=etl).json()["metadata"]
    assert [s["snapshot-id"] for s in md["snapshots"]] == [1, 4, 5] and md["next-row-id"] == 25


def test_v2_snapshots_need_no_row_lineage(http: httpx.Client, etl) -> None:  # type: ignore[no-untyped-def]
    assert create(http, etl, "plain2", "2").status_code == 200
    r = commit(http, etl, "plain2", snapshot(1, 1, None, None))
    assert r.status_code == 200, r.text
    assert "next-row-id" not in r.json()["metadata"]


# ---------------------------------------------------------------- v3-only schema parts
TS_NS = {"id": 2, "name": "ts", "type": "timestamp_ns", "required": False}
DEFAULTED = {"id": 2, "name": "n", "type": "int", "required": True, "initial-default": 5, "write-default": 5}


@pytest.mark.parametrize("field, words", [(TS_NS, ("timestamp_ns", "3")), (DEFAULTED, ("default", "v3"))])
def test_v3_schema_parts_refused_before_v3_accepted_at_v3(http: httpx.Client, etl, field, words) -> None:  # type: ignore[no-untyped-def]
    schema = {**SCHEMA_JSON, "schema-id": 1, "fields": [*SCHEMA_JSON["fields"], field]}
    update = {"action": "add-schema", "schema": schema, "last-column-id": 2}
    for version in ("1", "2"):
        assert create(http, etl, "parts", version).status_code == 200
        bad_request(commit(http, etl, "parts", update), *words)
    assert create(http, etl, "parts", "3").status_code == 200
    r = commit(http, etl, "parts", update, {"action": "set-current-schema", "schema-id": -1})
    assert r.status_code == 200, r.text
    fields = {f["name"]: f for f in r.json()["metadata"]["schemas"][-1]["fields"]}
    assert all(fields[field["name"]].get(k) == v for k, v in field.items())


def test_nanosecond_timestamps_need_v3(catalog: ReferenceCatalog) -> None:
    """pyiceberg 0.12's test_nanosecond_support_on_catalog, through this catalog."""
    cat = rest_catalog(catalog, "etl")
    schema = Schema(
        NestedField(1, "ts", TimestampType(), required=False),
        NestedField(2, "ts_ns", TimestampNanoType(), required=False),
        NestedField(3, "tstz_ns", TimestamptzNanoType(), required=False),
    )
    for name in ("nanos", "nanos2"):
        drop_if_exists(cat, name)
    table = cat.create_table(f"{NS}.nanos", schema, properties={"format-version": "3"})
    assert table.format_version == 3
    assert [f.field_type for f in table.schema().fields] == [
        TimestampType(),
        TimestampNanoType(),
        TimestamptzNanoType(),
    ]
    with pytest.raises(Exception, match="timestamp_ns is only supported in 3 or higher"):
        cat.create_table(f"{NS}.nanos2", schema, properties={"format-version": "2"})


# ---------------------------------------------------------------- default values (pyiceberg's test_rest_schema)
DEFAULTS = [
    (BooleanType(), True, False),
    (IntegerType(), 123, 456),
    (LongType(), 123, 456),
    (FloatType(), 19.25, 22.27),
    (DoubleType(), 19.25, 22.27),
    (DecimalType(10, 2), Decimal("19.25"), Decimal("22.27")),
    (StringType(), "abc", "def"),
    (DateType(), date(1990, 3, 1), date(1991, 3, 1)),
    (TimeType(), time(19, 25, 22), time(22, 25, 22)),
    (TimestampType(), datetime(1990, 5, 1, 22, 1, 1), datetime(2000, 5, 1, 22, 1, 1)),
    (
        TimestamptzType(),
        datetime(1990, 5, 1, 22, 1, 1, tzinfo=UTC),
        datetime(2000, 5, 1, 22, 1, 1, tzinfo=UTC),
    ),
    (BinaryType(), b"123", b"456"),
    (FixedType(4), b"1234", b"5678"),
    (UUIDType(), uuid.UUID(int=0x12345678123456781234567812345678), uuid.UUID(int=0x32145678123456781234567812345678)),
]


@pytest.mark.parametrize("iceberg_type, initial_default, write_default", DEFAULTS, ids=[str(d[0]) for d in DEFAULTS])
def test_initial_default_all_columns(
    catalog: ReferenceCatalog, iceberg_type: PrimitiveType, initial_default: Any, write_default: Any
) -> None:
    """pyiceberg 0.12's test_initial_default_all_columns: every type's defaults survive the catalog."""
    cat = fresh(catalog, "defaults")
    table = cat.create_table(f"{NS}.defaults", Schema(), properties={"format-version": "3"})
    tx = table.update_schema()
    tx.add_column(path="data", field_type=iceberg_type, required=True, default_value=initial_default)
    tx.add_column(path="nested", field_type=StructType(), required=False)
    tx.commit()
    tx = table.update_schema()
    tx.add_column(path=("nested", "data"), field_type=iceberg_type, required=True, default_value=initial_default)
    tx.commit()
    for field_id in [1, 3]:
        field = table.schema().find_field(field_id)
        assert field.initial_default == initial_default and field.write_default == initial_default
    with table.update_schema() as update:
        update.set_default_value("data", write_default)
        update.set_default_value(("nested", "data"), write_default)
    for field_id in [1, 3]:
        field = table.schema().find_field(field_id)
        assert field.initial_default == initial_default and field.write_default == write_default
    again = cat.load_table(f"{NS}.defaults")  # from the stored file, not the commit's answer
    assert again.schema() == table.schema()


def test_add_required_column_initial_default(catalog: ReferenceCatalog) -> None:
    """pyiceberg 0.12's test of the same name: a required column with a default, then promoted."""
    cat = fresh(catalog, "required")
    schema = Schema(NestedField(field_id=1, name="a", field_type=BooleanType(), required=False))
    table = cat.create_table(f"{NS}.required", schema, properties={"format-version": "3"})
    table.update_schema().add_column(path="data", field_type=IntegerType(), required=True, default_value=22).commit()
    assert table.schema() == Schema(
        NestedField(field_id=1, name="a", field_type=BooleanType(), required=False),
        NestedField(
            field_id=2, name="data", field_type=IntegerType(), required=True, initial_default=22, write_default=22
        ),
        schema_id=1,
    )
    table.update_schema().update_column(path="data", field_type=LongType()).rename_column("a", "bool").commit()
    assert table.schema() == Schema(
        NestedField(field_id=1, name="bool", field_type=BooleanType(), required=False),
        NestedField(
            field_id=2, name="data", field_type=LongType(), required=True, initial_default=22, write_default=22
        ),
        schema_id=1,
    )


# ---------------------------------------------------------------- v1/v2 unchanged
def test_v1_v2_files_are_pyiceberg_bytes(catalog: ReferenceCatalog, http: httpx.Client, etl) -> None:  # type: ignore[no-untyped-def]
    """For v1/v2 the writer is pyiceberg's own serialiser, byte for byte; only v3 goes around its refusal."""
    for version in ("1", "2"):
        r = create(http, etl, f"same{version}", version)
        assert r.status_code == 200, r.text
        raw = json.dumps(stored(catalog, r.json()["metadata-location"])).encode()
        parsed = TableMetadataUtil.parse_raw(raw.decode())
        assert parsed.format_version == int(version)
        assert formatversion.dump(parsed) == parsed.model_dump_json().encode()
        assert b"next-row-id" not in formatversion.dump(parsed)


def test_v3_answers_are_checked_against_the_spec(http: httpx.Client, etl) -> None:  # type: ignore[no-untyped-def]
    """The v3 answers this file provokes are validated at the session's end (conftest); the one spec
    correction they need (``PrimitiveTypeValue``: oneOf → anyOf, tests/spec_validation.py) is narrow."""
    from dataclasses import replace

    from tests.conftest import _spec
    from tests.spec_validation import validate_exchange

    assert create(http, etl, "checked", "3").status_code == 200
    schema = {**SCHEMA_JSON, "schema-id": 1, "fields": [*SCHEMA_JSON["fields"], DEFAULTED]}
    update = {"action": "add-schema", "schema": schema, "last-column-id": 2}
    assert commit(http, etl, "checked", update, {"action": "set-current-schema", "schema-id": -1}).status_code == 200
    assert http.get(f"{P}/namespaces/{NS}/tables/checked", headers=etl).status_code == 200
    load = None
    for _ in range(100):  # the recorder files an exchange just after its last byte is sent
        recorded = getattr(_spec.recorder, "exchanges", [])
        load = next((e for e in recorded if e.method == "GET" and e.path.endswith(f"/{NS}/tables/checked")), None)
        if load is not None:
            break
        sleep(0.05)
    assert load is not None, "the shared catalog's spec recorder saw no load of the table"
    assert validate_exchange(load) == []
    for wrong in ({"an": "object"}, [5], None):
        body = json.loads(load.body)
        body["metadata"]["schemas"][-1]["fields"][1]["initial-default"] = wrong
        assert validate_exchange(replace(load, body=json.dumps(body).encode())), wrong
    body = json.loads(load.body)
    del body["metadata"]["next-row-id"]
    body["metadata"]["format-version"] = 4
    assert validate_exchange(replace(load, body=json.dumps(body).encode()))


@pytest.mark.parametrize(
    "update, status",
    [
        ({"action": "add-encryption-key", "encryption-key": {"key-id": "k", "encrypted-key-metadata": "AA=="}}, 400),
        ({"action": "remove-encryption-key", "key-id": "k"}, 400),
        ({"action": "add-schema", "schema": {**SCHEMA_JSON, "fields": [{**TS_NS, "type": "variant"}]}}, 400),
        # a new schema id: two schemas with id 0 would be metadata Iceberg Java cannot read (a 400)
        (
            {
                "action": "add-schema",
                "schema": {**SCHEMA_JSON, "schema-id": 1, "fields": [{**TS_NS, "type": "geometry"}]},
            },
            200,
        ),
    ],
    ids=["add-encryption-key", "remove-encryption-key", "variant", "geometry"],
)
def test_v3_parts_this_catalog_lacks_are_400_never_500(http: httpx.Client, etl, update, status: int) -> None:  # type: ignore[no-untyped-def]
    """What pyiceberg 0.12 (the catalog's metadata engine) cannot represent is a client error, named."""
    assert create(http, etl, "lacks", "3").status_code == 200
    r = commit(http, etl, "lacks", update)
    assert r.status_code == status, r.text
    if status == 400:
        bad_request(r)


def test_pyiceberg_cannot_append_to_v3_yet(catalog: ReferenceCatalog) -> None:
    """The documented client limit (docs/format-versions.md): pyiceberg 0.12 reads v3 but writes no v3 data."""
    import pyarrow as pa

    cat = fresh(catalog, "pyappend")
    table = cat.create_table(
        f"{NS}.pyappend", Schema(NestedField(1, "id", LongType(), required=False)), properties={"format-version": "3"}
    )
    with pytest.raises(ValueError, match="Cannot write manifest for table version: 3"):
        table.append(pa.table({"id": pa.array([1], pa.int64())}))
    assert cat.load_table(f"{NS}.pyappend").metadata.snapshots == []
