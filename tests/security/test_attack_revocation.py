"""Revocation on the next request (issue 23, finding 4; issue 40, part 8), attacked over real HTTP on loopback.

An authorization code replayed (leaked with its verifier) revokes the sign-in session it started. An
access token of that session which the catalog had already verified (and cached) must be refused on
the next request: on the replica that saw the replay at once, and on another replica sharing the
database within the revocation generation's cache (1 s), never after the token cache's 60 s.

Grants are cached per replica under the shared grants version (``grantsversion.py``): a grant revoked, a
membership removed, a role or a principal deleted on one replica must refuse the very next loadTable and
credentials call on both replicas (SQLite shared file; PostgreSQL in the slow set), even after the
replica's pooled connection to the database was killed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lakesession.reference import ReferenceCatalog, start
from lakesession.reference import bootstrap as bootstrap_mod
from tests._pg import new_database
from tests.catalog.test_authcode import CLIENTS, get_code, params, pkce, redeem
from tests.conftest import BOOTSTRAP


def catalog_status(base: str, access_token: str) -> int:
    """What the token buys at one replica (its own address, not the shared public URL)."""
    r = httpx.get(
        f"{base}/v1/config",
        params={"warehouse": "lakesession"},
        headers={"Authorization": f"Bearer {access_token}"},
        timeout=30,
    )
    return r.status_code


def sign_in_session(cat: ReferenceCatalog) -> tuple[str, str, dict[str, str]]:
    verifier, challenge = pkce()
    code = get_code(cat, params(challenge))
    first = redeem(cat, code, verifier)
    assert first.status_code == 200, first.text
    return code, verifier, first.json()


def create_table(a: ReferenceCatalog, namespace: str, table: str) -> None:
    """etl makes ``namespace.table`` (and its namespace) through replica ``a``."""
    etl = {"Authorization": f"Bearer {a.admin.token_for('etl')}"}
    assert httpx.post(f"{a.bind_url}{P}/namespaces", json={"namespace": [namespace]}, headers=etl).status_code == 200
    r = httpx.post(
        f"{a.bind_url}{P}/namespaces/{namespace}/tables", json={"name": table, "schema": SCHEMA}, headers=etl
    )
    assert r.status_code == 200, r.text


def test_replayed_code_revokes_a_token_the_catalog_already_cached(catalog: ReferenceCatalog) -> None:
    catalog.admin.apply_bootstrap(bootstrap_mod.parse(CLIENTS))
    code, verifier, tokens = sign_in_session(catalog)
    access = tokens["access_token"]
    for _ in range(3):  # verified once, then served from the catalog's token cache
        assert catalog_status(catalog.bind_url, access) == 200
    replay = redeem(catalog, code, verifier)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert catalog_status(catalog.bind_url, access) == 401  # fa6e17e: 200 for up to 60 s more


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[ReferenceCatalog, ReferenceCatalog]]:
    """Two replicas sharing one data dir (SQLite database and issuer key) and one public URL (A's)."""
    policy = BOOTSTRAP.parse()
    a = start(data_dir=tmp_path, bootstrap=policy)
    try:
        b = start(data_dir=tmp_path, base_url=a.uri)
    except BaseException:
        a.stop()
        raise
    a.admin.apply_bootstrap(bootstrap_mod.parse(CLIENTS))
    yield a, b
    b.stop()
    a.stop()


def test_revocation_reaches_the_other_replica_within_a_second(
    replicas: tuple[ReferenceCatalog, ReferenceCatalog],
) -> None:
    a, b = replicas
    code, verifier, tokens = sign_in_session(a)
    access = tokens["access_token"]
    assert catalog_status(b.bind_url, access) == 200  # B verified and cached it
    assert catalog_status(b.bind_url, access) == 200
    assert redeem(a, code, verifier).status_code == 400  # the replay lands on A
    assert catalog_status(a.bind_url, access) == 401  # A: at once
    time.sleep(1.2)  # B re-reads the shared revocation generation at most every second
    assert catalog_status(b.bind_url, access) == 401  # fa6e17e: 200 until B's cache entry ages out (60 s)
    assert catalog_status(b.bind_url, a.admin.token_for("etl")) == 200  # other sessions are untouched


P = "/v1/lakesession"
ORDERS = f"{P}/namespaces/sales/tables/orders"
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
# each way an administrator takes alice's reading of sales.orders away (BOOTSTRAP: analysts hold TABLE_READ_DATA
# on namespace sales, alice is their only member), as the management API on replica A does it
TAKE_AWAY = {
    "grant revoked": (
        "DELETE",
        "/management/v1/grants",
        {"role": "analysts", "privilege": "TABLE_READ_DATA", "on": "namespace sales"},
    ),
    "membership removed": ("DELETE", "/management/v1/roles/analysts/members/alice", None),
    "role deleted": ("DELETE", "/management/v1/roles/analysts", None),
    "principal deleted": ("DELETE", "/management/v1/principals/alice", None),
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ReferenceCatalog, ReferenceCatalog]]:
    """Two replicas sharing one database (a SQLite file in one data dir, or PostgreSQL) and the issuer key."""
    db = new_database("revoke") if request.param == "postgresql" else None
    a = start(data_dir=tmp_path, bootstrap=BOOTSTRAP.parse(), db=db)
    try:
        b = start(data_dir=tmp_path, base_url=a.uri, db=db)
    except BaseException:
        a.stop()
        raise
    yield a, b
    b.stop()
    a.stop()


def _reads(srv: ReferenceCatalog, token: str) -> tuple[int, int]:
    """(loadTable, credentials) statuses for ``token`` at one replica's own address."""
    h = {"Authorization": f"Bearer {token}", "X-Iceberg-Access-Delegation": "vended-credentials"}
    with httpx.Client(base_url=srv.bind_url, headers=h, timeout=30) as c:
        return c.get(ORDERS).status_code, c.get(f"{ORDERS}/credentials").status_code


def _kill_connections(db_url: str) -> int:
    """Terminate every other session on the replicas' PostgreSQL database (a failover, a restart, a proxy)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            return len(
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).all()
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize("how", list(TAKE_AWAY))
def test_attack_the_next_read_after_a_revocation_on_another_replica_is_refused(
    shared: tuple[ReferenceCatalog, ReferenceCatalog], how: str
) -> None:
    a, b = shared
    create_table(a, "sales", "orders")
    alice = a.admin.token_for("alice")
    for _ in range(3):  # both replicas have verified the token and cached alice's grants
        assert _reads(b, alice) == (200, 200)
        assert _reads(a, alice) == (200, 200)

    method, path, body = TAKE_AWAY[how]
    admin = {"Authorization": f"Bearer {a.admin.token_for('admin')}"}
    r = httpx.request(method, f"{a.bind_url}{path}", json=body, headers=admin, timeout=30)
    assert r.status_code == 204, r.text

    # the very next request, no pause: refused on the other replica and on this one
    assert _reads(b, alice) == (403, 403), how
    assert _reads(a, alice) == (403, 403), how


def test_a_grant_on_one_replica_opens_the_next_read_on_the_other(
    shared: tuple[ReferenceCatalog, ReferenceCatalog],
) -> None:
    a, b = shared
    create_table(a, "hr", "pay")
    bob = {"Authorization": f"Bearer {a.admin.token_for('bob')}"}
    for _ in range(2):
        assert httpx.get(f"{b.bind_url}{P}/namespaces/hr/tables/pay", headers=bob).status_code == 403
    admin = {"Authorization": f"Bearer {a.admin.token_for('admin')}"}
    for step in (
        ("POST", "/management/v1/roles", {"name": "hr-readers"}),
        ("PUT", "/management/v1/roles/hr-readers/members/bob", None),
        ("POST", "/management/v1/grants", {"role": "hr-readers", "privilege": "TABLE_READ_DATA", "on": "namespace hr"}),
    ):
        assert httpx.request(step[0], f"{a.bind_url}{step[1]}", json=step[2], headers=admin).status_code in (201, 204)
    assert httpx.get(f"{b.bind_url}{P}/namespaces/hr/tables/pay", headers=bob).status_code == 200


@pytest.mark.slow
def test_attack_revocation_holds_after_the_replicas_lost_their_database_connections(tmp_path: Path) -> None:
    """PostgreSQL restarted under the replicas (every session killed, the kept version-read one too): the
    next read reconnects and still sees the revocation made after the loss; nothing answers from cache."""
    db = new_database("revoke-lost")
    a = start(data_dir=tmp_path, bootstrap=BOOTSTRAP.parse(), db=db)
    b = start(data_dir=tmp_path, base_url=a.uri, db=db)
    try:
        etl = {"Authorization": f"Bearer {a.admin.token_for('etl')}"}
        assert httpx.post(f"{a.bind_url}{P}/namespaces", json={"namespace": ["sales"]}, headers=etl).status_code == 200
        body = {"name": "orders", "schema": SCHEMA}
        assert httpx.post(f"{a.bind_url}{P}/namespaces/sales/tables", json=body, headers=etl).status_code == 200
        alice = a.admin.token_for("alice")
        assert _reads(b, alice) == (200, 200)
        assert _kill_connections(db) >= 2  # at least each replica's kept connection
        assert _reads(b, alice) == (200, 200)  # reconnected, answered
        assert _kill_connections(db) >= 1
        admin = {"Authorization": f"Bearer {a.admin.token_for('admin')}"}
        r = httpx.delete(f"{a.bind_url}/management/v1/roles/analysts/members/alice", headers=admin)
        assert r.status_code == 204, r.text
        assert _reads(b, alice) == (403, 403)
    finally:
        b.stop()
        a.stop()
