"""The catalog never writes or adopts metadata its engines cannot read (issues #32 and #40), differentially.

Hypothesis sends, over real HTTP to a reference catalog on loopback, every table update action (one kind
each: add-schema … assign-uuid), create-table bodies (schemas with defaults, partition specs, write orders,
stage-create) and register-table requests for crafted metadata files under the table's own location
(strategies: ``tests/security/_metadata_strategies.py``). Every metadata file the catalog accepted (a 200)
is read by Iceberg Java 1.12 (``TableMetadataParser`` plus what an engine computes on load, one JVM:
``tests/_icebergjava.py``) and by pyiceberg's ``TableMetadataUtil``; a file either refuses fails the test,
and so does any 5xx. Each kind must reach both sides: at least 100 accepted and 100 refused.

Examples per kind (derandomized): 170 in CI, 340 with ``LAKESESSION_SOAK=1`` (``tests/_soak.py``), any number with
``LAKESESSION_DIFF_EXAMPLES`` (a one-off large run: ``LAKESESSION_DIFF_EXAMPLES=5000 python -m pytest
tests/security/test_metadata_differential.py``). The minimum of each side is 100 from 280 examples up, in
proportion below.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.table.metadata import TableMetadataUtil

from tests._icebergjava import java_parser
from tests._soak import sized
from tests.factories import Policy, make_catalog
from tests.security import _metadata_strategies as gen

pytestmark = pytest.mark.slow  # a JVM and some 10,000 requests: about three minutes on two cores

P = "/v1/lakesession"
NS = "diff"
EXAMPLES = sized(170, 340, "LAKESESSION_DIFF_EXAMPLES")
MINIMUM = min(100, EXAMPLES * 100 // 280)  # accepted and refused, each, per kind (60 at 170: fewest seen 62)
PER_TABLE = 25  # examples against one table before a fresh one (its metadata stays small) …
FRESHER = {  # … and fewer for the kinds that use up what the setup made (removals, upgrades)
    k: 3
    for k in "remove-snapshots remove-snapshot-ref remove-statistics remove-partition-statistics remove-partition-specs "
    "remove-schemas upgrade-format-version set-current-schema set-default-spec set-default-sort-order".split()
}
POLICY = Policy().service("writer", "writer-secret-diff-1", role="w").grant("w", "CATALOG_MANAGE_CONTENT", "catalog")
COUNTS: dict[str, dict[str, int]] = {}
DROP = object()  # a generated member ``fill`` leaves out
REASONS: dict[str, Counter[str]] = {}  # why each kind was refused (the 400's message, digits masked)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


class Session:
    """The writer's HTTP client, the warehouse, and Java's parser."""

    def __init__(self, client: httpx.Client, warehouse: str, java: Callable[[Path], str | None]) -> None:
        self.client, self.warehouse, self.java = client, warehouse.rstrip("/"), java
        self.serial = iter(range(10**9))

    def readers_refuse(self, location: str) -> list[str]:
        """What Iceberg Java and pyiceberg say about a metadata file (empty: both read it)."""
        path = Path(location.removeprefix("file://"))
        errors = [] if (j := self.java(path)) is None else [f"Iceberg Java: {j}"]
        try:
            TableMetadataUtil.parse_raw(path.read_text())
        except Exception as e:  # any refusal is the finding
            errors.append(f"pyiceberg: {type(e).__name__}: {e}")
        return errors

    def record(self, kind: str, r: httpx.Response, sent: Any) -> bool:
        assert r.status_code < 500, (kind, sent, r.text)
        accepted = r.status_code == 200
        counts = COUNTS.setdefault(kind, {"accepted": 0, "refused": 0})
        counts["accepted" if accepted else "refused"] += 1
        if not accepted:
            assert r.status_code in (400, 404, 409), (kind, sent, r.status_code, r.text)
            message = r.json()["error"]["message"]
            REASONS.setdefault(kind, Counter())[re.sub(r"\d+", "N", message)[:90]] += 1
        return accepted

    def fill(self, value: Any, loc: str, meta: dict[str, Any] | None = None) -> Any:
        """``{loc}``/``{wh}`` in generated strings → the table's location / the warehouse; ``@now±ms`` → the
        time of sending plus that offset (near the catalog's clock); ``@seq±k``/``@row±k``/``@new±k`` → the
        table's ``last-sequence-number``/``next-row-id``/highest snapshot id + 1 (as last answered, ``meta``)
        plus k."""
        version = (meta or {}).get("format-version", 3)
        if isinstance(value, str) and (value[:4], version) in (("@seq", 1), ("@row", 1), ("@row", 2)):
            return DROP  # a sane snapshot of that format version has no such member
        if isinstance(value, str) and value[:4] in ("@now", "@seq", "@row", "@new"):
            base = {
                "@now": int(time.time() * 1000),
                "@seq": (meta or {}).get("last-sequence-number", 0),
                "@row": (meta or {}).get("next-row-id") or 0,
                "@new": max([0, *(sn["snapshot-id"] for sn in (meta or {}).get("snapshots") or [])]) + 1,
            }[value[:4]]
            return base + int(value[4:])
        if isinstance(value, str):
            return value.replace("{loc}", loc).replace("{wh}", self.warehouse)
        if isinstance(value, list | tuple):
            return type(value)(self.fill(v, loc, meta) for v in value)
        if isinstance(value, dict):
            filled = {k: self.fill(v, loc, meta) for k, v in value.items()}
            return {k: v for k, v in filled.items() if v is not DROP}
        return value


class _FreshToken(httpx.Auth):
    """The writer's token, minted again every half hour: a 5,000-example run outlives one token's hour (it took
    61 minutes on a busy machine, and every request after the hour was a 401)."""

    def __init__(self, mint: Callable[[], str]) -> None:
        self.mint, self.token, self.minted = mint, "", -1e9

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if time.monotonic() - self.minted > 1800:
            self.token, self.minted = self.mint(), time.monotonic()
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    with make_catalog(POLICY, data_dir=tmp_path_factory.mktemp("differential")) as handle, java_parser() as java:
        auth = _FreshToken(lambda: handle.admin.token_for("writer"))
        with httpx.Client(base_url=handle.uri + P, auth=auth, timeout=60) as client:
            assert client.post("/namespaces", json={"namespace": [NS]}).status_code == 200
            body = {"name": "probe", "schema": gen.SCHEMA}
            location = client.post(f"/namespaces/{NS}/tables", json=body).json()["metadata"]["location"]
            yield Session(client, location.rsplit(f"/{NS}/", 1)[0], java)  # the warehouse's root


def _setup(version: str) -> list[dict[str, Any]]:
    """A table worth updating: three snapshots and two refs, a second schema and sort order, statistics."""
    now = int(time.time() * 1000) - 5_000
    updates: list[dict[str, Any]] = []
    for sid in (1, 2, 3):
        snap: dict[str, Any] = {
            "snapshot-id": sid,
            "timestamp-ms": now + sid,
            "manifest-list": f"file:///nowhere/{sid}.avro",
            "summary": {"operation": "append"},
            "schema-id": 0,
        }
        if sid > 1:
            snap["parent-snapshot-id"] = sid - 1
        if version != "1":
            snap["sequence-number"] = sid
        if version == "3":
            snap["first-row-id"], snap["added-rows"] = sid - 1, 1
        updates.append(gen.update("add-snapshot", snapshot=snap))
    updates.append(gen.update("set-snapshot-ref", **{"ref-name": "main", "type": "branch", "snapshot-id": 3}))
    updates.append(gen.update("set-snapshot-ref", **{"ref-name": "b1", "type": "branch", "snapshot-id": 2}))
    updates.append(gen.update("add-schema", schema=gen.SCHEMA_1))
    order = {
        "order-id": 1,
        "fields": [{"transform": "identity", "source-id": 1, "direction": "asc", "null-order": "nulls-first"}],
    }
    updates.append(gen.update("add-sort-order", **{"sort-order": order}))
    updates.append(gen.update("set-statistics", statistics=gen.statistics(1, 10, [1])))
    return updates


def _table(s: Session, kind: str, version: str, tables: dict[str, Any], fresh: bool) -> tuple[str, str, dict[str, Any]]:
    """The table this example updates: a fresh one every ``PER_TABLE`` examples per format version (or when
    ``fresh``: hypothesis varies how much earlier examples changed the table)."""
    per_table = FRESHER.get(kind, PER_TABLE)
    name, loc, used, meta = tables.get(version, ("", "", per_table, {}))
    if used >= per_table or fresh:
        name = f"{kind.replace('-', '_')}_{version}_{next(s.serial)}"
        body = {"name": name, "schema": gen.SCHEMA, "properties": {"format-version": version}}
        r = s.client.post(f"/namespaces/{NS}/tables", json=body)
        assert r.status_code == 200, r.text
        loc = r.json()["metadata"]["location"]
        r = s.client.post(f"/namespaces/{NS}/tables/{name}", json={"requirements": [], "updates": _setup(version)})
        assert r.status_code == 200, r.text
        used, meta = 0, r.json()["metadata"]
    tables[version] = (name, loc, used + 1, meta)
    return name, loc, meta


def _assert_minimum(kind: str, request: pytest.FixtureRequest) -> None:
    counts = COUNTS.get(kind, {"accepted": 0, "refused": 0})
    request.node.user_properties.append((kind, counts))
    print(f"{kind}: {counts}", *(f"\n    {n} × {m}" for m, n in REASONS.get(kind, Counter()).most_common(6)))
    assert counts["accepted"] >= MINIMUM and counts["refused"] >= MINIMUM, (kind, counts)


@pytest.mark.parametrize("kind", list(gen.KINDS))
def test_every_accepted_update_is_readable(session: Session, kind: str, request: pytest.FixtureRequest) -> None:
    tables: dict[str, Any] = {}  # format version → (name, location, examples so far, last metadata answered)

    def run(strategy: st.SearchStrategy[list[dict[str, Any]]], examples: int) -> None:
        @settings(SETTINGS, max_examples=examples)
        @given(version=st.sampled_from(["1", "2", "3"]), updates=strategy, fresh=st.integers(0, 2**16))
        def commit(version: str, updates: list[dict[str, Any]], fresh: int) -> None:
            name, loc, meta = _table(session, kind, version, tables, fresh % 8 == 0)
            sent = session.fill(updates, loc, meta)
            r = session.client.post(f"/namespaces/{NS}/tables/{name}", json={"requirements": [], "updates": sent})
            if session.record(kind, r, sent):
                tables[version] = (*tables[version][:3], r.json()["metadata"])
                errors = session.readers_refuse(r.json()["metadata-location"])
                assert errors == [], f"the catalog accepted {sent} (v{version}) and wrote metadata that {errors}"

        commit()

    strategy = gen.KINDS[kind]
    if isinstance(strategy, gen.Split):  # its valid and invalid requests in the proportion asked, each its own run
        invalid = EXAMPLES * strategy.invalid_pct // 100
        run(strategy.valid, EXAMPLES - invalid)
        run(strategy.invalid, invalid)
    else:
        run(strategy, EXAMPLES)
    _assert_minimum(kind, request)


def test_every_accepted_create_is_readable(session: Session, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    @SETTINGS
    @given(body=gen.create_body())
    def create(body: dict[str, Any]) -> None:
        name = f"create_{next(session.serial)}"
        r = session.client.post(f"/namespaces/{NS}/tables", json={**body, "name": name})
        if not session.record("create", r, body):
            assert session.client.head(f"/namespaces/{NS}/tables/{name}").status_code == 404
            return
        location = r.json().get("metadata-location")
        if location is None:  # stage-create: the metadata the create commit would write, as answered
            staged = tmp_path / f"{name}.metadata.json"
            staged.write_text(json.dumps(r.json()["metadata"]))
            location = staged.as_uri()
        errors = session.readers_refuse(location)
        assert errors == [], f"the catalog created {body} and wrote metadata that {errors}"

    create()
    _assert_minimum("create", request)


@pytest.fixture(scope="module")
def templates(session: Session) -> dict[int, dict[str, Any]]:
    """An honest metadata file per format version, to craft register requests from."""
    out = {}
    for version in (1, 2, 3):
        body = {"name": f"template_{version}", "schema": gen.SCHEMA, "properties": {"format-version": str(version)}}
        r = session.client.post(f"/namespaces/{NS}/tables", json=body)
        assert r.status_code == 200, r.text
        out[version] = r.json()["metadata"]
    return out


def test_every_adopted_register_is_readable(
    session: Session, templates: dict[int, dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    @SETTINGS
    @given(version=st.sampled_from([1, 2, 3]), mutations=gen.register_mutations)
    def register(version: int, mutations: list[tuple[str, Any]]) -> None:
        name = f"reg_{next(session.serial)}"
        doc = copy.deepcopy(templates[version])
        doc["location"] = f"{session.warehouse}/{NS}/{name}"  # under its namespace, as a create would put it
        for kind, arg in session.fill(mutations, doc["location"]):
            gen.apply_mutation(doc, kind, arg)
        path = Path(doc["location"].removeprefix("file://")) / "metadata" / "00000-crafted.metadata.json"
        assert path.is_absolute(), f"a crafted file belongs under the test's warehouse, not the cwd: {path}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        body = {"name": name, "metadata-location": path.as_uri()}
        r = session.client.post(f"/namespaces/{NS}/register", json=body)
        if not session.record("register", r, mutations):
            assert session.client.head(f"/namespaces/{NS}/tables/{name}").status_code == 404
            return
        errors = session.readers_refuse(path.as_uri())
        assert errors == [], f"the catalog adopted {mutations} (v{version}), a file that {errors}"

    register()
    _assert_minimum("register", request)
