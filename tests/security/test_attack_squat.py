"""Storage squatting (issue 23, finding 7), attacked over real HTTP on loopback.

mallory may only create tables and views in ``scratch``. She places a table (or a view, or a table's
data path) at ``{warehouse}/finance``, the default home of a namespace that does not exist yet; on
fa6e17e ``etl`` then could not create ``finance`` (400) and mallory's table owned its storage. A table's
or view's storage must lie inside its own namespace's location (or a storage location the caller was
granted, a hook that grants nothing until storage locations become securables).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lakesession.reference import ReferenceCatalog, start
from tests.factories import Policy
from tests.support import SCHEMA

POLICY = (
    Policy()
    .service("etl", "etl-secret-squat", role="eng")
    .user("mallory", "mallory-secret-squat", role="scratchers")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant_all(
        "scratchers",
        [
            "TABLE_CREATE",
            "TABLE_WRITE_PROPERTIES",
            "TABLE_WRITE_DATA",
            "VIEW_CREATE",
            "NAMESPACE_WRITE_PROPERTIES",
            "NAMESPACE_CREATE",
        ],
        "namespace scratch",
    )
)
P = "/v1/lakesession"


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    handle = start(data_dir=tmp_path_factory.mktemp("squat"), bootstrap=POLICY.parse())
    etl = {"Authorization": f"Bearer {handle.admin.token_for('etl')}"}
    assert httpx.post(f"{handle.uri}{P}/namespaces", headers=etl, json={"namespace": ["scratch"]}).is_success
    yield handle
    handle.stop()


def as_(cat: ReferenceCatalog, who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {cat.admin.token_for(who)}"}


def create_namespace(cat: ReferenceCatalog, who: str, *levels: str, location: str | None = None) -> httpx.Response:
    """Create the namespace ``levels`` as ``who``, placed at ``location`` when given."""
    body: dict[str, Any] = {"namespace": list(levels)}
    if location is not None:
        body["properties"] = {"location": location}
    return httpx.post(f"{cat.uri}{P}/namespaces", headers=as_(cat, who), json=body)


def create_table(cat: ReferenceCatalog, who: str, ns: str, name: str, **extra: Any) -> httpx.Response:
    body = {"name": name, "schema": SCHEMA, **extra}
    return httpx.post(f"{cat.uri}{P}/namespaces/{ns}/tables", headers=as_(cat, who), json=body)


def test_a_table_cannot_squat_another_namespaces_home(cat: ReferenceCatalog) -> None:
    wh = cat.settings.warehouse
    squat = create_table(cat, "mallory", "scratch", "squat", location=f"{wh}/finance")
    assert squat.status_code == 400, squat.text  # fa6e17e: 200, and then etl's namespace below got 400
    assert "inside its namespace's location" in squat.json()["error"]["message"]
    made = create_namespace(cat, "etl", "finance")
    assert made.status_code == 200, made.text
    assert create_table(cat, "etl", "finance", "ledger").status_code == 200


@pytest.mark.parametrize(
    "how",
    [
        {"location": "{wh}/payroll/t"},  # inside a future namespace's home
        {"properties": {"write.data.path": "{wh}/payroll/data"}},  # the data path elsewhere
        {"location": "{wh}/scratch.evil/t"},  # a sibling whose name starts like ours
    ],
)
def test_a_tables_storage_stays_in_its_namespace(cat: ReferenceCatalog, how: dict[str, Any]) -> None:
    wh = cat.settings.warehouse
    extra = {
        k: (v.format(wh=wh) if isinstance(v, str) else {pk: pv.format(wh=wh) for pk, pv in v.items()})
        for k, v in how.items()
    }
    resp = create_table(cat, "mallory", "scratch", f"elsewhere_{len(str(how))}", **extra)
    assert resp.status_code == 400, resp.text


def test_inside_its_own_namespace_a_location_may_be_chosen(cat: ReferenceCatalog) -> None:
    wh = cat.settings.warehouse
    ok = create_table(cat, "mallory", "scratch", "custom", location=f"{wh}/scratch/my-own-dir")
    assert ok.status_code == 200, ok.text
    moved = httpx.post(  # and it cannot be moved out later by a commit
        f"{cat.uri}{P}/namespaces/scratch/tables/custom",
        headers=as_(cat, "mallory"),
        json={"requirements": [], "updates": [{"action": "set-location", "location": f"{wh}/audit"}]},
    )
    assert moved.status_code == 400, moved.text


def test_a_view_cannot_squat_another_namespaces_home(cat: ReferenceCatalog) -> None:
    wh = cat.settings.warehouse
    view = {
        "name": "squat_view",
        "location": f"{wh}/marketing",
        "schema": SCHEMA,
        "view-version": {
            "version-id": 1,
            "timestamp-ms": 1,
            "schema-id": 0,
            "summary": {},
            "default-namespace": ["scratch"],
            "representations": [{"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}],
        },
        "properties": {},
    }
    resp = httpx.post(f"{cat.uri}{P}/namespaces/scratch/views", headers=as_(cat, "mallory"), json=view)
    assert resp.status_code == 400, resp.text  # fa6e17e: 200
    made = create_namespace(cat, "etl", "marketing")
    assert made.status_code == 200, made.text


def test_a_namespace_location_cannot_squat_another_namespaces_home(cat: ReferenceCatalog) -> None:
    """mallory may edit her namespace's properties: she points its ``location`` at ``{warehouse}/hr``, the home of
    a namespace that does not exist yet, then makes a table there. On 79c62df both succeeded and etl could not
    create ``hr`` (its home belonged to mallory's namespace): the content managers' decision now."""
    wh = cat.settings.warehouse
    moved = httpx.post(
        f"{cat.uri}{P}/namespaces/scratch/properties",
        headers=as_(cat, "mallory"),
        json={"removals": [], "updates": {"location": f"{wh}/hr"}},
    )
    assert moved.status_code == 403, moved.text
    assert "CATALOG_MANAGE_CONTENT" in moved.json()["error"]["message"]
    assert create_table(cat, "mallory", "scratch", "payslips", location=f"{wh}/hr/payslips").status_code == 400
    made = create_namespace(cat, "etl", "hr")
    assert made.status_code == 200, made.text
    assert create_table(cat, "etl", "hr", "payslips").status_code == 200


def test_a_new_child_namespace_cannot_be_placed_at_another_namespaces_home(cat: ReferenceCatalog) -> None:
    wh = cat.settings.warehouse
    child = create_namespace(cat, "mallory", "scratch", "sub", location=f"{wh}/legal")
    assert child.status_code == 403, child.text
    made = create_namespace(cat, "etl", "legal")
    assert made.status_code == 200, made.text


def test_inside_its_own_home_a_namespace_location_may_be_chosen_and_managers_place_it_anywhere(
    cat: ReferenceCatalog,
) -> None:
    wh = cat.settings.warehouse
    own = create_namespace(cat, "mallory", "scratch", "mine", location=f"{wh}/scratch/mine")
    assert own.status_code == 200, own.text
    managed = create_namespace(cat, "etl", "archive", location=f"{wh}/cold/archive")
    assert managed.status_code == 200, managed.text
