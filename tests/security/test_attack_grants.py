"""Grants as an attacker (or a careless operator) meets them, over real HTTP on loopback (issue #32).

* A revocation that matches nothing (an unknown role, a grant the role does not hold, a misspelled
  table) is a 404 naming what was not found, not a 204: the operator who revokes ``readers`` instead
  of ``reader`` learns that the principal kept its access. Granting to an unknown role is a 404 too.
* ``mode=write`` for a table the session may only read is a 403 naming the grant, at the gateway's
  ``path-credentials`` and at the catalog's ``location-credentials``, never read-only keys the store
  refuses later, far away.
* A revocation through one ``serve`` process holds on the next request to another sharing the
  PostgreSQL database (slow: a real PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesession.reference import ReferenceCatalog
from lakesession.reference.errors import NotFound
from tests.factories import Policy, make_catalog
from tests.support import SCHEMA, gateway_client, seed_shop

P = "/v1/lakesession"
GRANT = {"role": "reader", "privilege": "TABLE_READ_DATA", "on": "table shop.orders"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def revoke(base: str, token: str, body: dict[str, str]) -> httpx.Response:
    return httpx.request("DELETE", f"{base}/management/v1/grants", json=body, headers=bearer(token), timeout=30)


def load(base: str, token: str, table: str = "shop/tables/orders") -> int:
    return httpx.get(f"{base}{P}/namespaces/{table}", headers=bearer(token), timeout=30).status_code


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    policy = (
        Policy().user("ann", "ann-secret-32", role="reader").grant("reader", "TABLE_READ_DATA", "table shop.orders")
    )
    with make_catalog(policy, data_dir=tmp_path_factory.mktemp("grants")) as handle:
        admin = bearer(handle.admin.token_for("admin"))
        assert httpx.post(f"{handle.uri}{P}/namespaces", json={"namespace": ["shop"]}, headers=admin).is_success
        r = httpx.post(
            f"{handle.uri}{P}/namespaces/shop/tables", json={"name": "orders", "schema": SCHEMA}, headers=admin
        )
        assert r.status_code == 200, r.text
        yield handle


def test_attack_revoking_what_does_not_exist_is_404_naming_it(cat: ReferenceCatalog) -> None:
    admin, ann = cat.admin.token_for("admin"), cat.admin.token_for("ann")
    assert load(cat.uri, ann) == 200
    misses = [
        ({**GRANT, "role": "readers"}, "Role 'readers' does not exist"),  # the operator's typo
        ({**GRANT, "on": "table shop.ordres"}, "does not hold TABLE_READ_DATA on table shop.ordres"),
        (
            {**GRANT, "privilege": "TABLE_WRITE_DATA"},
            "Role 'reader' does not hold TABLE_WRITE_DATA on table shop.orders",
        ),
    ]
    for body, named in misses:
        r = revoke(cat.uri, admin, body)
        assert r.status_code == 404, (body, r.text)  # before: 204, as if it had worked
        err = r.json()["error"]
        assert err["type"] == "NotFoundException" and err["code"] == 404 and named in err["message"], err
        assert load(cat.uri, ann) == 200  # so the operator knows: ann still reads the table
    # granting to a role that does not exist is a 404 too
    r = httpx.post(f"{cat.uri}/management/v1/grants", json={**GRANT, "role": "readers"}, headers=bearer(admin))
    assert r.status_code == 404 and "Role 'readers' does not exist" in r.json()["error"]["message"], r.text
    # the Python admin API agrees with the management API
    with pytest.raises(NotFound, match="does not hold TABLE_READ_DATA on table shop.ordres"):
        cat.admin.revoke("reader", "TABLE_READ_DATA", "table shop.ordres")
    with pytest.raises(NotFound, match="Role 'readers' does not exist"):
        cat.admin.revoke("readers", "TABLE_READ_DATA", "table shop.orders")
    # the real revocation: 204 and the access is gone; the same revocation again matches nothing
    assert revoke(cat.uri, admin, GRANT).status_code == 204
    assert load(cat.uri, ann) == 403
    again = revoke(cat.uri, admin, GRANT)
    assert again.status_code == 404 and "does not hold TABLE_READ_DATA on table shop.orders" in again.text
    cat.admin.grant(**GRANT)
    assert cat.admin.revoke(**GRANT) is True
    cat.admin.grant(**GRANT)
    assert load(cat.uri, ann) == 200


WH = "s3://gw32-bucket/wh"
S3_POLICY = (
    Policy()
    .service("etl", "etl-secret-32", role="eng")
    .user("alice", "alice-secret-32", role="readers")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant("readers", "TABLE_READ_DATA", "table shop.orders")
    .grant("readers", "TABLE_READ_PROPERTIES", "namespace shop")
)


@pytest.fixture(scope="module")
def s3cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(
        S3_POLICY, warehouse=WH, s3_emulator=True, credential_ttl=900, data_dir=tmp_path_factory.mktemp("gw32")
    ) as handle:
        seed_shop(handle, "gw32-etl", "etl:etl-secret-32")
        yield handle


def path_credentials(handle: ReferenceCatalog, who: str, path: str, mode: str) -> httpx.Response:
    """Through a gateway of ``who``'s session that loaded ``shop.orders`` first (as Spark would)."""
    with gateway_client(handle, who) as (_, c):
        vended = {"X-Iceberg-Access-Delegation": "vended-credentials"}
        assert c.get(f"{P}/namespaces/shop/tables/orders", headers=vended).status_code == 200
        return c.get("/lakesession/path-credentials", params={"path": path, "mode": mode})


def test_attack_write_credentials_for_a_read_only_table_are_403_naming_the_grant(s3cat: ReferenceCatalog) -> None:
    path = f"{WH}/shop/orders/data/part-attack.parquet"
    assert path_credentials(s3cat, "alice", path, "read").status_code == 200
    r = path_credentials(s3cat, "alice", path, "write")
    assert r.status_code == 403, r.text  # before: 200 with read-only keys; the store refused the write later
    err: dict[str, Any] = r.json()["error"]
    assert err["type"] == "ForbiddenException" and "storage-credentials" not in r.text
    assert "'alice' holds TABLE_READ_DATA on table shop.orders" in err["message"], err
    assert "needs TABLE_WRITE_DATA" in err["message"], err
    # the catalog itself says the same to any client asking it directly
    direct = httpx.get(
        f"{s3cat.uri}{P}/lakesession/location-credentials",
        params={"location": path, "mode": "write"},
        headers=bearer(s3cat.admin.token_for("alice")),
        timeout=30,
    )
    assert direct.status_code == 403 and direct.json()["error"]["message"] == err["message"], direct.text
    # a writer still gets write keys by path
    w = path_credentials(s3cat, "etl", path, "write")
    assert w.status_code == 200, w.text
    assert w.json()["storage-credentials"][0]["config"]["lakesession.storage-access"] == "read-write"


@pytest.mark.slow
def test_attack_revocation_holds_on_the_next_request_of_another_serve_on_postgresql(tmp_path: Path) -> None:
    from tests._pg import new_database
    from tests._serve import Served

    policy = tmp_path / "policy.yaml"
    policy.write_text(Policy().user("ann", "ann-pw-32", role="reader").yaml())
    args = ["--port", "0", "--db", new_database("grants32"), "--data-dir", str(tmp_path / "shared")]
    args += ["--bootstrap", str(policy)]
    with Served(args) as a, Served(args) as b:
        admin, ann = a.admin_token(), b.token("ann", "ann-pw-32")
        assert httpx.post(f"{a.uri}{P}/namespaces", json={"namespace": ["shop"]}, headers=bearer(admin)).is_success
        r = httpx.post(
            f"{a.uri}{P}/namespaces/shop/tables", json={"name": "orders", "schema": SCHEMA}, headers=bearer(admin)
        )
        assert r.status_code == 200, r.text
        r = httpx.post(f"{a.uri}/management/v1/grants", json=GRANT, headers=bearer(admin), timeout=30)
        assert r.status_code == 201, r.text
        assert [load(b.uri, ann) for _ in range(3)] == [200, 200, 200]  # b has read (and cached) ann's grants
        assert revoke(a.uri, admin, GRANT).status_code == 204
        assert load(b.uri, ann) == 403  # before: 200 for up to 2 s more (b's grant cache)
