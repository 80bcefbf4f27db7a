"""The catalog trusting a real Keycloak realm: principals from ``preferred_username``, roles from its groups.

The session's Keycloak 26.7.3 (``tests/_keycloak.py``), the module's own copy of ``docs/how-to/keycloak/lake-realm.json``, and
``lakesession serve --issuer-url <realm> --principal-claim preferred_username --roles-claim groups`` on the
embedded S3 emulator. The catalog's policy names no user: role ``analysts`` reads ``sales.orders``, role
``etl`` manages content; who holds them is Keycloak's group membership, read from each token. alice (group
``analysts``) reads the table with pyiceberg through vended credentials (and in Spark); bob (no group) is
refused; alice removed from the group in Keycloak is refused with her next token; the ``etl`` client's
service account (``service-account-etl``, group ``etl``) writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lakesession._spark.errors import CatalogAccessError
from tests._keycloak import Keycloak, claims_of
from tests._serve import Served
from tests._sockets import exposed, listening
from tests.keycloak._catalog import audit, catalog, read_ids, served_by_realm

pytestmark = [pytest.mark.slow, pytest.mark.keycloak]


@pytest.fixture(scope="module")
def served(kc: Keycloak, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_by_realm(kc, tmp_path_factory.mktemp("kc-serve")) as srv:
        yield srv


def test_keycloak_listens_on_loopback_only(kc: Keycloak) -> None:
    """No cluster transport on the host's address: Keycloak's production default (``--cache=ispn``) opens
    JGroups on every interface (seen: ``192.0.2.2:7801`` and ``*:57801``); the fixture runs ``--cache=local``.
    Besides HTTP and management, one loopback port stays (the transaction manager's recovery listener)."""
    assert exposed(kc.pid) == []
    ports = {port for _, port in listening(kc.pid)}
    assert {int(kc.base.rsplit(":", 1)[1]), int(kc.management.rsplit(":", 1)[1])} <= ports
    assert len(ports) <= 3, listening(kc.pid)


def test_keycloak_tokens_have_the_shape_the_catalog_is_configured_for(kc: Keycloak) -> None:
    alice = claims_of(kc.user_token("alice"))
    assert alice["iss"] == kc.issuer and alice["preferred_username"] == "alice"
    assert alice["sub"] != "alice"  # a UUID: principal_claim must name preferred_username
    assert {"lakesession", "engine"} <= set(alice["aud"]) and alice["groups"] == ["analysts"]
    etl = claims_of(kc.client_token("etl"))
    assert etl["preferred_username"] == "service-account-etl" and etl["groups"] == ["etl"]
    assert "groups" not in claims_of(kc.user_token("bob"))  # no group: Keycloak leaves the claim out


def test_a_token_without_the_audience_mapper_is_refused_naming_it(kc: Keycloak, served: Served) -> None:
    """Keycloak's own ``admin-cli`` client has no audience mapper: alice's token from it is not for the catalog."""
    token = kc.password_grant("alice", client="admin-cli")["access_token"]
    assert "lakesession" not in str(claims_of(token).get("aud"))
    r = httpx.get(
        f"{served.uri}/v1/config", params={"warehouse": "lakesession"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 401, r.text
    message = r.json()["error"]["message"]
    # Keycloak 26's admin-cli sends lightweight access tokens: no aud, and no sub either
    assert "missing claim" in message and "'lakesession' in aud" in message and "audience mapper" in message


def test_alice_reads_through_her_group_and_bob_is_refused(kc: Keycloak, served: Served) -> None:
    assert read_ids(served, kc.user_token("alice"), "alice") == [1, 2, 3]
    assert ("load_table", "table sales.orders", "allow") in audit(served.data_dir, "alice")  # type: ignore[attr-defined]
    with pytest.raises(ForbiddenError, match="bob"):
        catalog(served, kc.user_token("bob"), "bob").load_table(("sales", "orders"))


def test_leaving_the_group_in_keycloak_refuses_her_next_token(kc: Keycloak, served: Served) -> None:
    before = kc.user_token("alice")
    kc.remove_from_group("alice", "analysts")
    try:
        after = kc.user_token("alice")
        assert "groups" not in claims_of(after)
        with pytest.raises(ForbiddenError, match="alice"):
            catalog(served, after, "alice-after").load_table(("sales", "orders"))
        # the token issued before the change still names the group until it expires (the realm's
        # accessTokenLifespan, 300 s): that is the bound on how long a removal takes (docs/how-to/keycloak.md)
        assert read_ids(served, before, "alice-before") == [1, 2, 3]
    finally:
        kc.add_to_group("alice", "analysts")
    assert read_ids(served, kc.user_token("alice"), "alice-again") == [1, 2, 3]


def test_a_service_principal_by_client_credentials(kc: Keycloak, served: Served) -> None:
    etl = catalog(served, kc.client_token("etl"), "etl2")
    etl.create_namespace("scratch")
    schema = Schema(NestedField(1, "id", LongType()))
    etl.create_table(("scratch", "t"), schema).append(pa.table({"id": pa.array([7], pa.int64())}))
    assert etl.load_table(("scratch", "t")).scan().to_arrow().column("id").to_pylist() == [7]
    assert ("create_table", "table scratch.t", "issued") in audit(served.data_dir, "service-account-etl")  # type: ignore[attr-defined]
    with pytest.raises(ForbiddenError, match="alice"):  # analysts read sales.orders only
        catalog(served, kc.user_token("alice"), "alice-scratch").load_table(("scratch", "t"))


def test_alice_reads_in_spark_with_her_keycloak_token(kc: Keycloak, served: Served, lake: Any) -> None:
    """The suite's shared Spark JVM (``lake``), a second catalog on it holding alice's Keycloak token: the
    gateway forwards it upstream, Spark reads with the table's vended credentials."""
    import lakesession

    spark = lake.spark()
    default = spark.conf.get("spark.sql.defaultCatalog")
    session = lakesession.connect(
        uri=served.uri, warehouse=served.lines["warehouse"], token=kc.user_token("alice"), catalog_name="kc_alice"
    )
    try:
        session.spark()
        rows = session.sql("SELECT id, region FROM kc_alice.sales.orders ORDER BY id").collect()
        assert [(r.id, r.region) for r in rows] == [(1, "EU"), (2, "US"), (3, "EU")]
    finally:
        session.close()
        spark.conf.set("spark.sql.defaultCatalog", default)
    bob = lakesession.connect(
        uri=served.uri, warehouse=served.lines["warehouse"], token=kc.user_token("bob"), catalog_name="kc_bob"
    )
    try:
        bob.spark()
        with pytest.raises(CatalogAccessError, match="bob"):
            bob.sql("SELECT * FROM kc_bob.sales.orders").collect()
    finally:
        bob.close()
        spark.conf.set("spark.sql.defaultCatalog", default)
