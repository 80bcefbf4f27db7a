"""Attacks on roles taken from an identity provider's tokens (``roles_claim``) and principals from claim paths.

The catalog trusts an external issuer (a second reference catalog's embedded one, whose key mints the tokens
an IdP such as Keycloak would: ``preferred_username``, a ``groups`` claim, ``aud`` a list with ``account``).
Its policy declares ``analysts`` (read ``sales.orders``), ``stewards`` (``TOKEN_EXCHANGE``) and the built-in
``catalog_admin`` (``CATALOG_MANAGE_ACCESS``); no user is a member of anything in the catalog itself.
Every attack is the real HTTP request, then the S3 call the vended credentials would allow.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from joserfc import jwt

from lakesession.reference import ReferenceCatalog
from tests.factories import Policy, make_catalog, vended_s3_client
from tests.support import error_model, granted

P = "/v1/lakesession"
BUCKET = "lake-token-roles"
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
POLICY = (
    Policy()
    .service("etl", role="eng")
    .member("analysts")
    .member("stewards")
    .member("auditors")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant("analysts", "TABLE_READ_DATA", "table sales.orders")
    .grant("stewards", "TOKEN_EXCHANGE", "catalog")
    .grant("auditors", "TABLE_READ_DATA", "table sales.returns")
)


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(Policy(), data_dir=tmp_path_factory.mktemp("idp")) as handle:
        yield handle


def mint(
    idp: ReferenceCatalog, username: Any = "alice", *, aud: Any = ("lakesession", "account"), **claims: Any
) -> str:
    """A token as Keycloak shapes it: ``sub`` a UUID, the name in ``preferred_username``, ``typ`` JWT."""
    issuer = idp.app.state.issuer
    now = int(time.time())
    body = {
        "iss": idp.issuer_uri,
        "sub": "f1e2d3c4-0000-4000-8000-" + secrets.token_hex(6),
        "aud": list(aud) if isinstance(aud, tuple) else aud,
        "azp": "lakesession-cli",
        "iat": now,
        "exp": now + 300,
        "jti": secrets.token_hex(8),
        "preferred_username": username,
        **claims,
    }
    body = {k: v for k, v in body.items() if not (k == "aud" and v is None)}  # aud=None: no aud at all
    return jwt.encode({"alg": issuer.alg, "typ": "JWT", "kid": issuer.kid}, body, issuer.key)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def seed(handle: ReferenceCatalog, idp: ReferenceCatalog, bucket: str = BUCKET) -> None:
    etl = bearer(mint(idp, "etl"))
    assert httpx.post(f"{handle.uri}{P}/namespaces", json={"namespace": ["sales"]}, headers=etl).status_code == 200
    for t in ("orders", "returns"):
        r = httpx.post(f"{handle.uri}{P}/namespaces/sales/tables", json={"name": t, "schema": SCHEMA}, headers=etl)
        assert r.status_code == 200, r.text
        key = r.json()["metadata"]["location"].split(f"s3://{bucket}/", 1)[1].rstrip("/")
        handle.s3_emulator.client().put_object(Bucket=bucket, Key=f"{key}/data/{t}.parquet", Body=f"{t}".encode())


def trusting(idp: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory, suffix: str, **claims: Any) -> Any:
    """A catalog of POLICY trusting ``idp``'s tokens, read through ``claims``; bucket ``BUCKET + suffix``."""
    return make_catalog(
        POLICY,
        bucket=BUCKET + suffix,
        data_dir=tmp_path_factory.mktemp(suffix.strip("-") or "lake"),
        issuer_url=idp.issuer_uri,
        **claims,
    )


@pytest.fixture(scope="module")
def lake(idp: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with trusting(idp, tmp_path_factory, "", principal_claim="preferred_username", roles_claim="groups") as handle:
        seed(handle, idp)
        yield handle


def load(handle: ReferenceCatalog, token: str, table: str = "orders") -> httpx.Response:
    return httpx.get(f"{handle.uri}{P}/namespaces/sales/tables/{table}", headers={**bearer(token), **VENDED})


def read_data(handle: ReferenceCatalog, answer: httpx.Response, table: str) -> bytes:
    """What the vended credentials of ``answer`` read from the table's data prefix (the store's own check)."""
    body = answer.json()
    cfg = body["storage-credentials"][0]["config"] if body.get("storage-credentials") else body["config"]
    key = body["metadata"]["location"].split(f"s3://{BUCKET}/", 1)[1].rstrip("/") + f"/data/{table}.parquet"
    s3 = vended_s3_client(handle.s3_emulator.endpoint, cfg)
    return bytes(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def unauthorized(r: httpx.Response, *words: str) -> str:
    """Assert ``r`` is the catalog's 401 ErrorModel naming each of ``words``; the message."""
    return error_model(r, 401, "NotAuthorizedException", *words)


# ---------------------------------------------------------------- groups become roles


def test_a_group_grants_its_role_and_the_credentials_read_the_table(
    lake: ReferenceCatalog, idp: ReferenceCatalog
) -> None:
    alice = mint(idp, "alice", groups=["analysts"])
    r = load(lake, alice)
    assert r.status_code == 200, r.text
    assert read_data(lake, r, "orders") == b"orders"
    assert load(lake, alice, "returns").status_code == 403  # analysts read orders only
    assert load(lake, mint(idp, "bob")).status_code == 403  # no group: nothing
    me = httpx.get(f"{lake.uri}/management/v1/me/grants", headers=bearer(alice)).json()
    assert me["principal"] == "alice" and "analysts" in me["roles"]
    records = [r for r in lake.admin.audit(principal="alice") if "sales.orders" in r.securable]
    assert any(r.decision == "allow" for r in records)


def test_a_group_naming_the_admin_role_does_not_make_an_admin(lake: ReferenceCatalog, idp: ReferenceCatalog) -> None:
    """An IdP group called ``catalog_admin`` (anyone who administers the IdP, or a careless group name) must not
    hand out the catalog's access management: roles holding CATALOG_MANAGE_ACCESS are never taken from tokens."""
    mallory = bearer(mint(idp, "mallory", groups=["catalog_admin", "analysts"]))
    grant = {"role": "analysts", "privilege": "TABLE_READ_DATA", "on": "table sales.returns"}
    r = httpx.post(f"{lake.uri}/management/v1/grants", json=grant, headers=mallory)
    assert r.status_code == 403, r.text
    assert httpx.get(f"{lake.uri}/management/v1/principals", headers=mallory).status_code == 403
    me = httpx.get(f"{lake.uri}/management/v1/me/grants", headers=mallory).json()
    assert "catalog_admin" not in me["roles"] and "analysts" in me["roles"]
    assert load(lake, mallory["Authorization"].split()[1], "returns").status_code == 403


def test_a_group_naming_a_token_exchange_role_is_ignored(lake: ReferenceCatalog, idp: ReferenceCatalog) -> None:
    me = httpx.get(f"{lake.uri}/management/v1/me/grants", headers=bearer(mint(idp, "mallory", groups=["stewards"])))
    assert me.status_code == 200 and me.json()["roles"] == [] and me.json()["grants"] == []


def test_a_role_that_becomes_privileged_stops_counting_for_tokens_at_once(
    lake: ReferenceCatalog, idp: ReferenceCatalog
) -> None:
    carol = mint(idp, "carol", groups=["auditors"])
    assert load(lake, carol, "returns").status_code == 200
    with granted(lake, "auditors", "CATALOG_MANAGE_ACCESS", "catalog"):
        assert load(lake, carol, "returns").status_code == 403  # the same token, the next request
        r = httpx.post(f"{lake.uri}/management/v1/roles", json={"name": "x-carol"}, headers=bearer(carol))
        assert r.status_code == 403, r.text
    assert load(lake, carol, "returns").status_code == 200


def test_leaving_a_group_and_granting_a_group_apply_on_the_next_request(
    lake: ReferenceCatalog, idp: ReferenceCatalog
) -> None:
    member, former = mint(idp, "dave", groups=["analysts"]), mint(idp, "dave", groups=[])
    assert load(lake, member).status_code == 200
    assert load(lake, former).status_code == 403  # the IdP's next token no longer names the group
    assert load(lake, member, "returns").status_code == 403
    with granted(lake, "analysts", "TABLE_READ_DATA", "table sales.returns"):
        assert load(lake, member, "returns").status_code == 200  # a grant to the group: at once, same token
    assert load(lake, member, "returns").status_code == 403


def test_groups_that_are_no_catalog_role_grant_nothing_and_many_groups_are_bounded(
    lake: ReferenceCatalog, idp: ReferenceCatalog
) -> None:
    names = [f"g{i}" for i in range(1200)] + ["x" * 300, 7, None, {"name": "analysts"}, ["analysts"]]
    t0 = time.monotonic()
    r = load(lake, mint(idp, "erin", groups=names))  # as many names as a token (16 KB at most) holds
    assert r.status_code == 403, r.text
    assert time.monotonic() - t0 < 5
    assert set(lake.app.state.services.directory.list_roles()) == {
        "catalog_admin",
        "eng",
        "analysts",
        "stewards",
        "auditors",
    }
    assert load(lake, mint(idp, "erin", groups=[*names, "analysts"])).status_code == 200  # the last name counts too
    assert load(lake, mint(idp, "erin", groups="analysts")).status_code == 200  # one name as a string


# ---------------------------------------------------------------- principals from claim paths, audiences
def test_a_principal_claim_that_is_not_a_string_is_refused_with_a_clear_401(
    lake: ReferenceCatalog, idp: ReferenceCatalog
) -> None:
    for value, kind in ((["admin"], "list"), ({"name": "admin"}, "object"), (7, "number"), ("", "empty")):
        msg = unauthorized(load(lake, mint(idp, value, groups=["analysts"])), "preferred_username", kind)
        assert "principal_claim" in msg
    unauthorized(load(lake, mint(idp, None, groups=["analysts"])), "preferred_username")


def test_a_claim_path_names_a_nested_principal(idp: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory) -> None:
    with trusting(
        idp,
        tmp_path_factory,
        "-path",
        principal_claim="ext.user",
        roles_claim="realm_access.roles",
        token_privileged_roles=["catalog_admin"],
    ) as handle:
        who = mint(idp, "nobody", ext={"user": "alice"}, realm_access={"roles": ["analysts", "catalog_admin"]})
        me = httpx.get(f"{handle.uri}/management/v1/me/grants", headers=bearer(who))
        assert me.status_code == 200, me.text
        assert me.json()["principal"] == "alice" and {"analysts", "catalog_admin"} <= set(me.json()["roles"])
        # declared privileged on purpose: this catalog lets the IdP name its admins
        assert httpx.get(f"{handle.uri}/management/v1/principals", headers=bearer(who)).status_code == 200
        # the path runs into a list: no principal
        bad = mint(idp, "nobody", ext=[{"user": "alice"}])
        unauthorized(httpx.get(f"{handle.uri}/management/v1/me/grants", headers=bearer(bad)), "ext.user")
        listed = mint(idp, "nobody", ext={"user": ["alice", "bob"]})
        unauthorized(httpx.get(f"{handle.uri}/management/v1/me/grants", headers=bearer(listed)), "ext.user", "list")


def test_keycloak_audiences_a_list_with_account_is_fine_account_alone_is_not(
    lake: ReferenceCatalog, idp: ReferenceCatalog
) -> None:
    assert (
        load(lake, mint(idp, "alice", aud=["engine", "lakesession", "account"], groups=["analysts"])).status_code == 200
    )
    assert load(lake, mint(idp, "alice", aud="lakesession", groups=["analysts"])).status_code == 200
    msg = unauthorized(load(lake, mint(idp, "alice", aud="account", groups=["analysts"])), "audience", "lakesession")
    assert "audience mapper" in msg
    # Keycloak's lightweight access tokens (its admin-cli client) carry no aud at all
    msg = unauthorized(
        load(lake, mint(idp, "alice", aud=None, groups=["analysts"])), "missing claim aud", "lakesession"
    )
    assert "audience mapper" in msg


def test_roles_from_tokens_are_off_unless_configured(
    idp: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with trusting(idp, tmp_path_factory, "-off", principal_claim="preferred_username") as handle:
        seed(handle, idp, BUCKET + "-off")
        r = load(handle, mint(idp, "alice", groups=["analysts"]))
        assert r.status_code == 403, r.text
