"""The catalog never writes metadata its engines cannot read (issue #32, round 4, item 1), differentially.

Hypothesis commits random sequences of table updates over real HTTP to a reference catalog on loopback:
snapshots with extreme ids, sequence numbers, timestamps and row-lineage numbers, schemas whose new field
carries a random ``initial-default``/``write-default`` (of its type or not), refs, properties, statistics,
format upgrades. Every metadata file the catalog accepted (a 200) is parsed by Iceberg Java 1.12's
``TableMetadataParser`` (one JVM, ``tests/_icebergjava.py``) and by pyiceberg's ``TableMetadataUtil``;
a file either refuses fails the test, and so does any 5xx. 500 sequences per run, derandomized.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.table.metadata import TableMetadataUtil

from tests._icebergjava import java_parser
from tests.factories import Policy, make_catalog

pytestmark = pytest.mark.slow  # a JVM and ~2,000 commits: about a minute

P = "/v1/lakesession"
NS = "diff"
NOW = int(time.time() * 1000)
POLICY = Policy().service("writer", "writer-secret-diff-1", role="w").grant("w", "CATALOG_MANAGE_CONTENT", "catalog")
SCHEMA: dict[str, Any] = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
EDGES = [0, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**70, -1, -(2**63), -(2**63) - 1]

longish = st.one_of(st.integers(0, 5), st.sampled_from(EDGES))
timestamps = st.one_of(st.integers(NOW - 10 * 60_000, NOW + 10 * 60_000), st.sampled_from(EDGES))
TYPES = "int long string boolean double float date time timestamp timestamptz decimal(9,2) fixed[2] binary uuid"
types = st.sampled_from(TYPES.split())
LITERALS = "2024-02-29 2024-02-30 12:30:00 25:00 2024-01-01T00:00:00 2024-01-01T00:00:00+00:00 1.25 1.2 NaN"
literals = st.sampled_from([*LITERALS.split(), "abcd", "abc", "zz", "12345678-1234-1234-1234-123456789012", "notalong"])
defaults = st.one_of(
    st.none(), literals, st.sampled_from(EDGES), st.booleans(), st.floats(-1e6, 1e6), st.text(max_size=3)
)


@st.composite
def snapshot(draw: st.DrawFn) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "snapshot-id": draw(st.one_of(st.integers(1, 3), st.sampled_from(EDGES))),
        "timestamp-ms": draw(timestamps),
        "manifest-list": "file:///nowhere/snap.avro",  # the catalog never reads it
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    for key, values in (("sequence-number", longish), ("parent-snapshot-id", st.integers(1, 3))):
        if draw(st.booleans()):
            snap[key] = draw(values)
    if draw(st.integers(0, 3)):  # mostly: a v3 table refuses snapshots without row lineage
        snap["first-row-id"], snap["added-rows"] = draw(longish), draw(longish)
    return {"action": "add-snapshot", "snapshot": snap}


@st.composite
def add_schema(draw: st.DrawFn) -> dict[str, Any]:
    field: dict[str, Any] = {"id": 2, "name": "x", "type": draw(types), "required": draw(st.booleans())}
    for key in ("initial-default", "write-default"):
        field[key] = draw(defaults)
    schema = {**SCHEMA, "schema-id": draw(st.sampled_from([1, 2**31])), "fields": [*SCHEMA["fields"], field]}
    return {"action": "add-schema", "schema": schema}


updates = st.one_of(
    snapshot(),
    snapshot(),
    add_schema(),
    st.builds(lambda s: {"action": "set-current-schema", "schema-id": s}, st.sampled_from([-1, 0, 1])),
    st.builds(
        lambda sid, kind: {"action": "set-snapshot-ref", "ref-name": "main", "type": kind, "snapshot-id": sid},
        st.integers(1, 3),
        st.sampled_from(["branch", "tag"]),
    ),
    st.builds(lambda sid: {"action": "remove-snapshots", "snapshot-ids": [sid]}, st.integers(1, 3)),
    st.builds(lambda v: {"action": "set-properties", "updates": {"k": v}}, st.text(max_size=3)),
    st.builds(lambda v: {"action": "upgrade-format-version", "format-version": v}, st.integers(1, 3)),
    st.builds(
        lambda sid, size: {
            "action": "set-statistics",
            "statistics": {
                "snapshot-id": sid,
                "statistics-path": "file:///nowhere/stats.puffin",
                "file-size-in-bytes": size,
                "file-footer-size-in-bytes": size,
                "blob-metadata": [],
            },
        },
        st.integers(1, 3),
        longish,
    ),
)
sequences = st.tuples(st.sampled_from(["1", "2", "3"]), st.lists(st.lists(updates, min_size=1, max_size=3), max_size=3))


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with make_catalog(POLICY, data_dir=tmp_path_factory.mktemp("differential")) as handle:
        headers = {"Authorization": f"Bearer {handle.admin.token_for('writer')}"}
        with httpx.Client(base_url=handle.uri + P, headers=headers, timeout=60) as client:
            assert client.post("/namespaces", json={"namespace": [NS]}).status_code == 200
            yield client


@pytest.fixture(scope="module")
def java() -> Iterator[Callable[[Path], str | None]]:
    with java_parser() as parse:
        yield parse


def readers_refuse(location: str, java: Callable[[Path], str | None]) -> list[str]:
    """What Iceberg Java and pyiceberg say about the metadata file the catalog wrote (empty: both read it)."""
    path = Path(location.removeprefix("file://"))
    errors = [] if (j := java(path)) is None else [f"Iceberg Java: {j}"]
    try:
        TableMetadataUtil.parse_raw(path.read_text())
    except Exception as e:  # any refusal is the finding
        errors.append(f"pyiceberg: {type(e).__name__}: {e}")
    return errors


def test_every_accepted_commit_is_readable_by_iceberg_java_and_pyiceberg(
    writer: httpx.Client, java: Callable[[Path], str | None], request: pytest.FixtureRequest
) -> None:
    counter = iter(range(10**9))
    seen = {"accepted": 0, "refused": 0}

    @settings(
        max_examples=500,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(sequences)
    def commits_stay_readable(sequence: tuple[str, list[list[dict[str, Any]]]]) -> None:
        version, commits = sequence
        name = f"t{next(counter)}"
        body = {"name": name, "schema": SCHEMA, "properties": {"format-version": version}}
        r = writer.post(f"/namespaces/{NS}/tables", json=body)
        assert r.status_code == 200, r.text
        assert readers_refuse(r.json()["metadata-location"], java) == []
        for updates in commits:
            r = writer.post(f"/namespaces/{NS}/tables/{name}", json={"requirements": [], "updates": updates})
            assert r.status_code < 500, (updates, r.text)
            if r.status_code != 200:
                seen["refused"] += 1
                continue
            seen["accepted"] += 1
            errors = readers_refuse(r.json()["metadata-location"], java)
            assert errors == [], f"the catalog accepted {updates} (v{version}) and wrote metadata that {errors}"

    commits_stay_readable()
    request.node.user_properties.append(("commits", seen))
    # the generator reaches both sides: commits the catalog writes and commits it refuses
    assert seen["accepted"] > 100 and seen["refused"] > 100, seen
