"""Hypothesis strategies for tests/security/test_metadata_differential.py: one per table update action, a
create-table body and a register-table mutation, each reaching both what the catalog accepts and what it
refuses (bad transforms and arguments, clashing names and ids, unknown references, far-future timestamps,
numbers past an int or a long, malformed JSON shapes). ``{loc}`` and ``{wh}`` in a generated string stand
for the table's location and the warehouse, filled in when the request is sent.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from hypothesis import strategies as st

NOW = int(time.time() * 1000)
EDGES = [0, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**70, -1, -(2**63), -(2**63) - 1]
YEAR_9999 = 253370764800000
FIELDS: list[dict[str, Any]] = [
    {"id": 1, "name": "id", "type": "long", "required": False},
    {"id": 2, "name": "ts", "type": "timestamp", "required": False},
    {"id": 3, "name": "s", "type": "string", "required": False},
    {"id": 4, "name": "b", "type": "boolean", "required": False},
    {"id": 5, "name": "d", "type": "date", "required": False},
    {"id": 6, "name": "dec", "type": "decimal(9,2)", "required": False},
    {
        "id": 7,
        "name": "l",
        "type": {"type": "list", "element-id": 8, "element": "int", "element-required": False},
        "required": False,
    },
    {
        "id": 9,
        "name": "st",
        "type": {"type": "struct", "fields": [{"id": 10, "name": "x", "type": "int", "required": False}]},
        "required": False,
    },
]
SCHEMA: dict[str, Any] = {"type": "struct", "schema-id": 0, "fields": FIELDS}
SCHEMA_1: dict[str, Any] = {
    **SCHEMA,
    "schema-id": 1,
    "fields": [*FIELDS, {"id": 11, "name": "extra", "type": "int", "required": False}],
}

longish = st.one_of(st.integers(0, 5), st.sampled_from(EDGES))
near_now = st.integers(-120_000, 120_000).map(lambda ms: f"@now{ms:+d}")  # sent as the time of sending ± ms
timestamps = st.one_of(near_now, near_now, st.sampled_from([*EDGES, YEAR_9999, NOW - 3_600_000]))
TRANSFORMS = [
    *"identity void year month day hour bucket[4] bucket[1] bucket[2147483647] truncate[3] truncate[10]".split(),
    *"bucket[0] truncate[0] bucket[2147483648] bucket[-1] truncate[-3] BUCKET[4] foo Identity".split(),
    "bucket[ 4]",
]
VALID_TRANSFORMS = ["identity", "void", "day", "bucket[4]", "truncate[3]", "year", "bucket[16]"]
transforms = st.one_of(st.sampled_from(VALID_TRANSFORMS), st.sampled_from(TRANSFORMS))
sources = st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 99])
TYPES = "int long string boolean double float date time timestamp timestamptz decimal(9,2) fixed[2] binary uuid".split()
types = st.sampled_from([*TYPES, "decimal(0,0)", "decimal(39,0)", "timestamp_ns", "unknown"])
LITERALS = "2024-02-29 2024-02-30 12:30:00 25:00 2024-01-01T00:00:00 2024-01-01T00:00:00+00:00 1.25 1.2 NaN".split()
defaults = st.one_of(
    st.none(),
    st.sampled_from([*LITERALS, "abcd", "zz", "notalong"]),
    st.sampled_from(EDGES),
    st.booleans(),
    st.integers(-5, 5),
)
snapshot_ids = st.sampled_from([1, 2, 3, 99])
sequence_numbers = st.one_of(st.integers(-1, 2).map(lambda k: f"@seq{k:+d}"), st.sampled_from(EDGES))  # last ± k
first_row_ids = st.one_of(st.integers(-1, 2).map(lambda k: f"@row{k:+d}"), st.sampled_from(EDGES))  # next-row-id ± k


def update(action: str, **fields: Any) -> dict[str, Any]:
    return {"action": action, **fields}


FITTING = [
    (1, "bucket[4]"),
    (1, "identity"),
    (2, "day"),
    (2, "hour"),
    (5, "month"),
    (3, "truncate[3]"),
    (6, "bucket[8]"),
    (2, "year"),
    (10, "identity"),
]


@st.composite
def partition_field(draw: st.DrawFn, i: int) -> dict[str, Any]:
    source, transform = draw(mostly(st.sampled_from(FITTING), st.tuples(sources, transforms), invalid_pct=35))
    return {
        "source-id": source,
        "transform": transform,
        "name": draw(st.sampled_from([f"p{i}"] * 6 + ["p0", "id", "ts", "id_bucket", ""])),
        "field-id": draw(st.sampled_from([1000 + i, 1000 + i, 1000 + i, 1000, 1003, 2**31])),
    }


@st.composite
def spec(draw: st.DrawFn) -> dict[str, Any]:
    fields = [draw(partition_field(i)) for i in range(draw(st.integers(0, 2)))]
    return {"spec-id": draw(st.sampled_from([0, 1, 3])), "fields": fields}


@st.composite
def order(draw: st.DrawFn) -> dict[str, Any]:
    fields = []
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):
        source, transform = draw(mostly(st.sampled_from(FITTING), st.tuples(sources, transforms), invalid_pct=35))
        direction = draw(st.sampled_from(["asc", "desc"] * 8 + ["up"]))
        fields.append(
            {
                "transform": transform,
                "source-id": source,
                "direction": direction,
                "null-order": draw(st.sampled_from(["nulls-first", "nulls-last"])),
            }
        )
    return {"order-id": draw(st.sampled_from([0, 1, 2, 3] if fields else [0, 0, 0, 1])), "fields": fields}


@st.composite
def new_field(draw: st.DrawFn) -> dict[str, Any]:
    field: dict[str, Any] = {
        "id": draw(st.sampled_from([11, 12, 11, 12, 1, 2**31])),
        "name": draw(st.sampled_from(["x", "y", "z", "id"])),
        "type": draw(st.one_of(st.sampled_from(["int", "string", "long"]), types)),
        "required": draw(st.integers(0, 3)) == 0,
    }
    for key in ("initial-default", "write-default"):
        if draw(st.integers(0, 2)) == 0:
            field[key] = draw(defaults)
    return field


@st.composite
def schema(draw: st.DrawFn) -> dict[str, Any]:
    fields = [f for f in FIELDS if not draw(st.integers(0, 9)) == 0]  # now and then a column dropped
    fields += draw(st.lists(new_field(), max_size=1))
    out = {**SCHEMA, "schema-id": draw(st.sampled_from([0, 1, 5, 2**31])), "fields": fields}
    if draw(st.integers(0, 7)) == 0:
        out["identifier-field-ids"] = draw(st.sampled_from([[1], [99], [11]]))
    return out


CORRUPTIONS: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("timestamp-ms", st.sampled_from([*EDGES, YEAR_9999, NOW - 3_600_000, "@now+120000"])),
    ("sequence-number", st.sampled_from([*EDGES, "@seq+0", "@seq-1"])),
    ("first-row-id", st.sampled_from([*EDGES, "@row-1"])),
    ("added-rows", st.sampled_from(EDGES)),
    ("snapshot-id", st.sampled_from(EDGES)),
    ("parent-snapshot-id", st.sampled_from([99, *EDGES])),
    ("summary", st.sampled_from([{"operation": "explode"}, {}])),
    ("schema-id", st.sampled_from([7, 2**31])),
]


@st.composite
def snapshot(draw: st.DrawFn) -> dict[str, Any]:
    """A sane snapshot (near the catalog's clock, sequence number and row ids past the table's), half the time
    with one member corrupted (see ``CORRUPTIONS``), or a member left out."""
    snap: dict[str, Any] = {
        "snapshot-id": draw(st.integers(0, 3).map(lambda k: f"@new{k:+d}")),  # past the table's highest id
        "timestamp-ms": draw(st.integers(-30_000, 30_000).map(lambda ms: f"@now{ms:+d}")),
        "manifest-list": "file:///nowhere/snap.avro",
        "summary": {"operation": draw(st.sampled_from(["append", "overwrite", "delete"]))},
        "schema-id": 0,
        "sequence-number": draw(st.integers(1, 3).map(lambda k: f"@seq{k:+d}")),
        "first-row-id": draw(st.integers(0, 3).map(lambda k: f"@row{k:+d}")),
        "added-rows": draw(st.integers(0, 10**6)),
    }
    if draw(st.booleans()):
        snap["parent-snapshot-id"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        key, values = draw(st.sampled_from(CORRUPTIONS))
        snap[key] = draw(values)
    elif draw(st.integers(0, 4)) == 0:
        del snap[draw(st.sampled_from(["sequence-number", "first-row-id", "added-rows", "timestamp-ms"]))]
    return snap


def statistics(sid: Any, size: Any, fields: Any) -> dict[str, Any]:
    blob = {"type": "apache-datasketches-theta-v1", "snapshot-id": sid, "sequence-number": 1, "fields": fields}
    return {
        "snapshot-id": sid,
        "statistics-path": "file:///nowhere/stats.puffin",
        "file-size-in-bytes": size,
        "file-footer-size-in-bytes": size,
        "blob-metadata": [blob],
    }


def malformed(action: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    """The action with a required member missing or of the wrong JSON type: a 400, never a 500."""
    return st.builds(
        lambda n, wrong: [
            {
                "action": action,
                **(
                    {
                        "schema": n,
                        "spec": [n],
                        "updates": n,
                        "removals": n,
                        "snapshot-ids": n,
                        "ref-name": [n],
                        "uuid": n,
                        "snapshot-id": [n],
                        "statistics": n,
                        "partition-statistics": n,
                    }
                    if wrong
                    else {"x": n}
                ),
            }
        ],
        st.integers(0, 10**6),
        st.booleans(),
    )


def _then(first: st.SearchStrategy[dict[str, Any]], follow: dict[str, Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """``first``, then now and then ``follow`` (e.g. set-current-schema -1 after add-schema)."""
    return st.tuples(first, st.booleans()).map(lambda t: [t[0], follow] if t[1] else [t[0]])


def twice(one: st.SearchStrategy[list[dict[str, Any]]]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """One or two of a kind's updates in one commit (a larger space than one alone)."""
    return st.lists(one, min_size=1, max_size=2).map(lambda lists: [u for updates in lists for u in updates])


def _maybe(prefix: dict[str, Any], rest: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.tuples(st.booleans(), rest).map(lambda t: [prefix, t[1]] if t[0] else [t[1]])


ADD_SPEC_1 = update(
    "add-spec",
    spec={"spec-id": 1, "fields": [{"source-id": 1, "transform": "bucket[8]", "name": "id_b8", "field-id": 1000}]},
)
ORDER_2 = {
    "order-id": 2,
    "fields": [{"transform": "identity", "source-id": 3, "direction": "desc", "null-order": "nulls-last"}],
}
PROPERTY_KEYS = [
    "k",
    "format-version",
    "write.data.path",
    "write.metadata.path",
    "write.metadata.previous-versions-max",
]
PROPERTY_VALUES = ["1", "2", "3", "x", "", "{loc}/data2", "{wh}/elsewhere", "file:///elsewhere", "s3://other/x"]

SCHEMA_2: dict[str, Any] = {
    **SCHEMA,
    "schema-id": 2,
    "fields": [*FIELDS, {"id": 12, "name": "extra2", "type": "long", "required": False}],
}
ADD_SCHEMA_2 = update("add-schema", schema=SCHEMA_2)
PARTITION_STATS_2 = {"snapshot-id": 2, "statistics-path": "file:///nowhere/p.parquet", "file-size-in-bytes": 3}


def mostly(
    valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any], invalid_pct: int = 30
) -> st.SearchStrategy[Any]:
    """``valid``, and ``invalid`` about ``invalid_pct`` % of the time (``one_of`` would draw its branches evenly)."""
    return st.integers(0, 2**32 - 1).map(_percent).flatmap(lambda i: invalid if i < invalid_pct else valid)


def _percent(i: int) -> int:
    """0–99, about evenly, from any drawn int: hypothesis favours small and boundary integers, so a plain
    ``integers(0, 99)`` would pick the first branch far more often than asked."""
    return (i * 2654435761 + 40503) % 2**32 % 100


class Split(NamedTuple):
    """A kind's valid and invalid requests, run apart by the test (``invalid_pct`` % of the examples invalid):
    hypothesis's own choice between branches is far from even, and each side must reach 100 examples."""

    valid: st.SearchStrategy[list[dict[str, Any]]]
    invalid: st.SearchStrategy[list[dict[str, Any]]]
    invalid_pct: int


def split(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any], invalid_pct: int = 35) -> Split:
    return Split(valid, invalid, invalid_pct)


def one(action: str, **fields: Any) -> list[dict[str, Any]]:
    return [update(action, **fields)]


ids_kept = st.lists(st.sampled_from([1, 2, 99]), min_size=1, max_size=2)
ids_with_0 = st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=2).map(lambda ids: [0, *ids])  # current/default

KINDS: dict[str, st.SearchStrategy[list[dict[str, Any]]] | Split] = {
    "add-schema": split(
        _then(
            schema().map(lambda s: update("add-schema", schema=s)), update("set-current-schema", **{"schema-id": -1})
        ),
        malformed("add-schema"),
        invalid_pct=25,
    ),
    "set-current-schema": twice(
        _maybe(
            ADD_SCHEMA_2,
            st.sampled_from([-1, -1, 0, 1, 2, 7]).map(lambda i: update("set-current-schema", **{"schema-id": i})),
        )
    ),
    "add-spec": split(
        _then(spec().map(lambda s: update("add-spec", spec=s)), update("set-default-spec", **{"spec-id": -1})),
        malformed("add-spec"),
        invalid_pct=15,
    ),
    "set-default-spec": twice(
        _maybe(
            ADD_SPEC_1, st.sampled_from([-1, -1, 0, 1, 5]).map(lambda i: update("set-default-spec", **{"spec-id": i}))
        )
    ),
    "add-sort-order": split(
        _then(
            order().map(lambda o: update("add-sort-order", **{"sort-order": o})),
            update("set-default-sort-order", **{"sort-order-id": -1}),
        ),
        malformed("add-sort-order"),
        invalid_pct=30,
    ),
    "set-default-sort-order": twice(
        _maybe(
            update("add-sort-order", **{"sort-order": ORDER_2}),
            st.sampled_from([-1, 0, 1, 2, 3]).map(lambda i: update("set-default-sort-order", **{"sort-order-id": i})),
        )
    ),
    "add-snapshot": split(
        snapshot().map(lambda s: one("add-snapshot", snapshot=s)), malformed("add-snapshot"), invalid_pct=30
    ),
    "set-snapshot-ref": split(
        twice(
            st.builds(
                lambda name, kind, sid, age: one(
                    "set-snapshot-ref", **{"ref-name": name, "type": kind, "snapshot-id": sid, **age}
                ),
                st.sampled_from(["main", "b1", "t1", "t2"]),
                st.sampled_from(["branch", "tag"]),
                st.sampled_from([1, 2, 3]),
                st.one_of(st.just({}), st.integers(1, 10**9).map(lambda v: {"max-ref-age-ms": v})),
            )
        ),
        st.builds(
            lambda name, kind, sid, age: one(
                "set-snapshot-ref", **{"ref-name": name, "type": kind, "snapshot-id": sid, **age}
            ),
            st.sampled_from(["main", "b1", "t1"]),
            st.sampled_from(["branch", "tag", "other"]),
            snapshot_ids,
            st.sampled_from(EDGES).map(lambda v: {"max-ref-age-ms": v}),
        ),
        invalid_pct=45,
    ),
    "remove-snapshots": split(
        twice(
            st.lists(snapshot_ids, min_size=1, max_size=2).map(
                lambda ids: one("remove-snapshots", **{"snapshot-ids": ids})
            )
        ),
        malformed("remove-snapshots"),
        invalid_pct=45,
    ),
    "remove-snapshot-ref": split(
        twice(st.sampled_from(["main", "b1", "nope"]).map(lambda n: one("remove-snapshot-ref", **{"ref-name": n}))),
        malformed("remove-snapshot-ref"),
        invalid_pct=45,
    ),
    "set-properties": split(
        st.one_of(
            st.integers(0, 10**6).map(lambda n: {"k": str(n)}),
            st.integers(0, 10**6).map(lambda n: {"write.data.path": f"{{loc}}/data{n}"}),
        ).map(lambda d: one("set-properties", updates=d)),
        st.dictionaries(st.sampled_from(PROPERTY_KEYS), st.sampled_from(PROPERTY_VALUES), min_size=1, max_size=2).map(
            lambda d: one("set-properties", updates=d)
        ),
        invalid_pct=55,
    ),
    "remove-properties": split(
        twice(
            st.lists(st.sampled_from([*PROPERTY_KEYS, "nope"]), max_size=2).map(
                lambda r: one("remove-properties", removals=r)
            )
        ),
        malformed("remove-properties"),
        invalid_pct=45,
    ),
    "set-location": split(
        st.integers(0, 10**6).map(lambda n: one("set-location", location=f"{{loc}}/v{n}")),
        st.one_of(
            st.sampled_from(["{wh}/diff/elsewhere_x", "file:///elsewhere", "relative/path", "{wh}", "{loc}/../x"]).map(
                lambda loc: one("set-location", location=loc)
            ),
            malformed("set-location"),
        ),
        invalid_pct=45,
    ),
    "upgrade-format-version": st.sampled_from([3, 3, 3, 3, 2, 2, 1, 4, 0, "x", None]).map(
        lambda v: one("upgrade-format-version", **{"format-version": v})
    ),
    "set-statistics": split(
        st.builds(
            lambda sid, size, f: one("set-statistics", statistics=statistics(sid, size, f)),
            snapshot_ids,
            st.integers(0, 10**9),
            st.sampled_from([[1], [1, 2], []]),
        ),
        st.one_of(
            st.builds(
                lambda sid, size, f: one("set-statistics", statistics=statistics(sid, size, f)),
                snapshot_ids,
                longish,
                st.sampled_from([[2**31], [1]]),
            ),
            malformed("set-statistics"),
        ),
        invalid_pct=55,
    ),
    "remove-statistics": split(
        twice(
            _maybe(
                update("set-statistics", statistics=statistics(2, 10, [1])),
                snapshot_ids.map(lambda sid: update("remove-statistics", **{"snapshot-id": sid})),
            )
        ),
        malformed("remove-statistics"),
        invalid_pct=45,
    ),
    "set-partition-statistics": split(
        st.builds(
            lambda sid, size: one(
                "set-partition-statistics",
                **{
                    "partition-statistics": {
                        "snapshot-id": sid,
                        "statistics-path": "file:///nowhere/p.parquet",
                        "file-size-in-bytes": size,
                    }
                },
            ),
            snapshot_ids,
            st.one_of(st.integers(0, 10**9), st.sampled_from(EDGES)),
        ),
        malformed("set-partition-statistics"),
        invalid_pct=45,
    ),
    "remove-partition-statistics": split(
        twice(
            _maybe(
                update("set-partition-statistics", **{"partition-statistics": PARTITION_STATS_2}),
                snapshot_ids.map(lambda sid: update("remove-partition-statistics", **{"snapshot-id": sid})),
            )
        ),
        malformed("remove-partition-statistics"),
        invalid_pct=45,
    ),
    "remove-partition-specs": split(
        *(
            _maybe(ADD_SPEC_1, ids.map(lambda i: update("remove-partition-specs", **{"spec-ids": i})))
            for ids in (ids_kept, ids_with_0)
        ),
        invalid_pct=45,
    ),
    "remove-schemas": split(
        *(
            _maybe(ADD_SCHEMA_2, ids.map(lambda i: update("remove-schemas", **{"schema-ids": i})))
            for ids in (ids_kept, ids_with_0)
        ),
        invalid_pct=45,
    ),
    "assign-uuid": split(
        st.uuids().map(lambda u: one("assign-uuid", uuid=str(u))),
        st.one_of(
            st.sampled_from(["not-a-uuid", "", "1234"]).map(lambda u: one("assign-uuid", uuid=u)),
            malformed("assign-uuid"),
        ),
        invalid_pct=45,
    ),
}


@st.composite
def create_body(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schema": draw(st.one_of(st.just(SCHEMA), schema())),
        "properties": {"format-version": draw(st.sampled_from(["1", "2", "3"]))},
        "stage-create": draw(st.integers(0, 3)) == 0,
    }
    if draw(st.booleans()):
        body["partition-spec"] = draw(spec())
    if draw(st.booleans()):
        body["write-order"] = draw(order())
    return body


def _mutations() -> st.SearchStrategy[tuple[str, Any]]:
    """One change to an honest metadata file (see ``apply_mutation``)."""
    return st.one_of(
        st.tuples(st.just("spec"), st.tuples(spec(), st.booleans())),
        st.tuples(st.just("order"), st.tuples(order(), st.booleans())),
        st.tuples(st.just("field"), new_field()),
        st.tuples(st.just("snapshot"), st.tuples(timestamps, st.sampled_from([None, 1, 42]), st.booleans())),
        st.tuples(st.just("updated"), timestamps),
        st.tuples(
            st.just("number"),
            st.tuples(
                st.sampled_from(["last-sequence-number", "last-column-id", "last-partition-id"]), st.sampled_from(EDGES)
            ),
        ),
        st.tuples(
            st.just("pointer"),
            st.tuples(
                st.sampled_from(["current-schema-id", "default-spec-id", "default-sort-order-id"]),
                st.sampled_from([0, 1, 9, -1]),
            ),
        ),
        st.tuples(st.just("honest"), st.integers(0, 10**6)),
    )


register_mutations = st.lists(_mutations(), max_size=1)


def apply_mutation(doc: dict[str, Any], kind: str, arg: Any) -> None:
    """Change ``doc`` (an honest metadata file's JSON) in place by one generated mutation."""
    if kind == "spec":
        new, make_default = arg
        doc["partition-specs"].append(new)
        doc["last-partition-id"] = max([doc.get("last-partition-id", 999), *(f["field-id"] for f in new["fields"])])
        if make_default:
            doc["default-spec-id"] = new["spec-id"]
    elif kind == "order":
        new, make_default = arg
        doc["sort-orders"].append(new)
        if make_default:
            doc["default-sort-order-id"] = new["order-id"]
    elif kind == "field":
        doc["schemas"][0]["fields"].append(arg)
        if isinstance(arg["id"], int):
            doc["last-column-id"] = max(doc["last-column-id"], arg["id"])
    elif kind == "snapshot":
        ts, ref, logged = arg
        snap = {
            "snapshot-id": 1,
            "timestamp-ms": ts,
            "manifest-list": "file:///nowhere/s.avro",
            "summary": {"operation": "append"},
            "schema-id": 0,
        }
        if doc["format-version"] >= 2:
            snap["sequence-number"] = 1
            doc["last-sequence-number"] = 1
        if doc["format-version"] >= 3:
            snap["first-row-id"], snap["added-rows"] = 0, 1
            doc["next-row-id"] = 1
        doc["snapshots"] = [snap]
        if ref is not None:
            doc["current-snapshot-id"] = ref
            doc["refs"] = {"main": {"snapshot-id": ref, "type": "branch"}}
        if logged:
            doc["snapshot-log"] = [{"snapshot-id": 1, "timestamp-ms": ts}]
        if isinstance(ts, int):
            doc["last-updated-ms"] = max(doc["last-updated-ms"], ts)
    elif kind == "updated":
        doc["last-updated-ms"] = arg if arg is not None else int(time.time() * 1000)
    elif kind in ("number", "pointer"):
        key, value = arg
        doc[key] = value
