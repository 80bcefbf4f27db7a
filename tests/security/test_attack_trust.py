"""Attacks on the trust model: view chains (``referenced-by``), DEFINER views and trusted engines (issue 12, item 4).

Catalog ``lake`` trusts the platform engine (``engine``) and, by name, alice's requests (as if they
came through that engine). bob owns the DEFINER view ``sales.v_orders`` (``SELECT … FROM orders``)
and may read ``hr.salaries`` and read/write ``sales.orders``; alice may only read the view. Each
attack is the real request to the catalog, then — when it handed something out — the S3 call it
enables against the emulator, asserting the denial.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from lakesession.reference import bootstrap, start
from lakesession.reference.viewsecurity import TrustConfigurationError
from tests._lake import Lake
from tests.factories import Policy, make_catalog
from tests.support import OWNER, SCHEMA, view_body

P = "/v1/lakesession"
BUCKET = "atk-trust-bucket"
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}
POLICY = (
    Policy()
    .service("engine", role="platform")
    .user("alice", role="r_alice")
    .user("bob", role="r_bob")
    .grant("platform", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant("r_alice", "VIEW_READ", "view sales.v_orders")
    .grant("r_bob", "VIEW_READ", "namespace sales")
    .grant_all("r_bob", ["TABLE_READ_DATA", "TABLE_WRITE_DATA"], "table sales.orders")
    .grant("r_bob", "TABLE_READ_DATA", "table hr.salaries")
)
CHAIN = "sales%1Fv_orders"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with make_catalog(
        POLICY,
        bucket=BUCKET,
        data_dir=tmp_path_factory.mktemp("atk-trust"),
        trusted_engines=[{"principal": ["engine", "alice"]}],
    ) as handle:
        lk = Lake(handle, bucket=BUCKET)
        for ns in ("sales", "hr"):
            assert lk.call("POST", "/namespaces", "engine", {"namespace": [ns]}).status_code == 200
        for ns, t in (("sales", "orders"), ("hr", "salaries")):
            r = lk.call("POST", f"/namespaces/{ns}/tables", "engine", {"name": t, "schema": SCHEMA})
            assert r.status_code == 200, r.text
            lk.loc[t] = r.json()["metadata"]["location"].split(f"s3://{BUCKET}/", 1)[1].rstrip("/")
            lk.s3.put_object(Bucket=BUCKET, Key=f"{lk.loc[t]}/data/{t}.parquet", Body=t.encode())
        for body in (
            view_body("v_orders", "SELECT o.id FROM orders o WHERE o.id > 10", "bob"),
            view_body("v_private", "SELECT * FROM v_orders", "bob"),
        ):
            r = lk.call("POST", "/namespaces/sales/views", "engine", body)
            assert r.status_code == 200, r.text
        yield lk


# ---------------------------------------------------------------- chain links are verified on the server
def test_referenced_by_a_view_that_does_not_read_the_target(lake: Lake) -> None:
    """v_orders reads orders; naming it for hr.salaries borrowed bob's rights on salaries (write-mode creds)."""
    r = lake.call("GET", f"/namespaces/hr/tables/salaries?referenced-by={CHAIN}", headers=VENDED)
    stolen = None
    if r.status_code == 200 and r.json().get("storage-credentials"):  # the old catalog: read salaries with them
        s3 = lake.store_client(r.json()["storage-credentials"][0]["config"])
        stolen = s3.get_object(Bucket=BUCKET, Key=f"{lake.loc['salaries']}/data/salaries.parquet")["Body"].read()
    assert r.status_code == 403 and stolen is None, (r.status_code, stolen)
    assert "not read by the SQL of view sales.v_orders" in r.json()["error"]["message"]
    assert "metadata" not in r.text
    # the refresh endpoint and the signer refuse the same chain
    creds = lake.call("GET", f"/namespaces/hr/tables/salaries/credentials?referenced-by={CHAIN}")
    assert creds.status_code == 403
    key = f"{lake.loc['salaries']}/data/salaries.parquet"
    sign = lake.call(
        "POST",
        f"/namespaces/hr/tables/salaries/sign?referenced-by={CHAIN}",
        body={"region": "us-east-1", "uri": f"{lake.handle.s3_emulator.endpoint}/{BUCKET}/{key}", "method": "GET"},
    )
    assert sign.status_code == 403
    # a deeper link that the previous view does not read: v_orders does not read v_private
    r = lake.call("GET", f"/namespaces/sales/views/v_private?referenced-by={CHAIN}")
    assert r.status_code == 403


def test_chain_through_a_view_the_user_cannot_read(lake: Lake) -> None:
    # v_private (bob's, reads v_orders) is not readable by alice: the first view must be hers to read
    r = lake.call("GET", f"/namespaces/sales/tables/orders?referenced-by=sales%1Fv_private,{CHAIN}", headers=VENDED)
    assert r.status_code == 403 and "step 1 (view sales.v_private)" in r.json()["error"]["message"]
    assert "storage-credentials" not in r.text


def test_legitimate_chain_still_reads(lake: Lake) -> None:
    r = lake.call("GET", f"/namespaces/sales/tables/orders?referenced-by={CHAIN}", headers=VENDED)
    assert r.status_code == 200, r.text
    s3 = lake.store_client(r.json()["storage-credentials"][0]["config"])
    body = s3.get_object(Bucket=BUCKET, Key=f"{lake.loc['orders']}/data/orders.parquet")["Body"].read()
    assert body == b"orders"


# ---------------------------------------------------------------- DEFINER access is read-only
def test_definer_chain_gets_read_mode_credentials(lake: Lake) -> None:
    since = time.time() - 0.001
    r = lake.call("GET", f"/namespaces/sales/tables/orders?referenced-by={CHAIN}", headers=VENDED)
    assert r.status_code == 200, r.text
    s3 = lake.store_client(r.json()["storage-credentials"][0]["config"])
    planted = f"{lake.loc['orders']}/data/planted.parquet"
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.put_object(Bucket=BUCKET, Key=planted, Body=b"x")
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.delete_object(Bucket=BUCKET, Key=f"{lake.loc['orders']}/data/orders.parquet")
    assert not lake.exists(planted) and lake.exists(f"{lake.loc['orders']}/data/orders.parquet")
    vended = [x for x in lake.handle.admin.audit(since=since, action="load_table") if x.decision == "issued"]
    assert vended
    modes = [x.detail["mode"] for x in lake.handle.admin.audit(since=since) if x.detail and "mode" in x.detail]
    assert modes and set(modes) == {"read"}
    # the refresh endpoint, through the same chain, stays read-only too
    r = lake.call("GET", f"/namespaces/sales/tables/orders/credentials?referenced-by={CHAIN}")
    assert r.status_code == 200
    s3 = lake.store_client(r.json()["storage-credentials"][0]["config"])
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.put_object(Bucket=BUCKET, Key=planted, Body=b"x")


def test_definer_chain_gets_no_signed_writes(lake: Lake) -> None:
    key = f"{lake.loc['orders']}/data/signed-put.parquet"
    uri = f"{lake.handle.s3_emulator.endpoint}/{BUCKET}/{key}"
    r = lake.call(
        "POST",
        f"/namespaces/sales/tables/orders/sign?referenced-by={CHAIN}",
        body={"region": "us-east-1", "uri": uri, "method": "PUT", "headers": {}},
    )
    if r.status_code == 200:  # the old catalog: the signature writes into bob's table
        httpx.put(uri, headers={k: v[0] for k, v in r.json()["headers"].items()}, content=b"x", timeout=30)
    assert r.status_code == 403 and not lake.exists(key), r.text
    assert "read-only" in r.json()["error"]["message"]
    ok = lake.call(
        "POST",
        f"/namespaces/sales/tables/orders/sign?referenced-by={CHAIN}",
        body={"region": "us-east-1", "uri": uri.replace("signed-put", "orders"), "method": "GET"},
    )
    assert ok.status_code == 200, ok.text


def test_commit_with_referenced_by_is_refused(lake: Lake) -> None:
    update = {"updates": [{"action": "set-properties", "updates": {"owner-note": "through-a-view"}}]}
    for who in ("alice", "engine"):  # engine could commit by itself: never through a chain
        r = lake.call("POST", f"/namespaces/sales/tables/orders?referenced-by={CHAIN}", who, update)
        assert r.status_code == 403, (who, r.text)
    props = lake.call("GET", "/namespaces/sales/tables/orders", "engine").json()["metadata"].get("properties", {})
    assert "owner-note" not in props
    r = lake.call("DELETE", f"/namespaces/sales/tables/orders?referenced-by={CHAIN}", "engine")
    assert r.status_code == 403
    # a table named "sign" is committed to, not signed for
    assert (
        lake.call("POST", "/namespaces/sales/tables", "engine", {"name": "sign", "schema": SCHEMA}).status_code == 200
    )
    r = lake.call("POST", f"/namespaces/sales/tables/sign?referenced-by={CHAIN}", "engine", update)
    assert r.status_code == 403 and "read-only" in r.json()["error"]["message"]
    assert lake.call("GET", "/namespaces/sales/tables/orders", "engine").status_code == 200


# ---------------------------------------------------------------- chain length, owner property
def test_chain_of_eleven_answers_400_before_any_lookup(lake: Lake) -> None:
    chain = ",".join(f"nowhere%1Fmissing{i}" for i in range(11))
    since = time.time() - 0.001
    for method, path, body in (
        ("GET", f"/namespaces/sales/tables/orders?referenced-by={chain}", None),
        ("GET", f"/namespaces/sales/tables/orders/credentials?referenced-by={chain}", None),
        ("GET", f"/namespaces/sales/views/v_orders?referenced-by={chain}", None),
        (
            "POST",
            f"/namespaces/sales/tables/orders/sign?referenced-by={chain}",
            {"region": "us-east-1", "uri": "http://nowhere.invalid/x", "method": "GET"},
        ),
    ):
        r = lake.call(method, path, body=body)
        assert r.status_code == 400 and r.json()["error"]["type"] == "TooManyViewsInChainException", (path, r.text)
    steps = [x for x in lake.handle.admin.audit(since=since) if x.detail and "step" in x.detail]
    assert steps == []


def test_owner_property_must_name_an_existing_principal(lake: Lake) -> None:
    r = lake.call("POST", "/namespaces/sales/views", "engine", view_body("v_ghost", "SELECT id FROM orders", "nobody"))
    assert r.status_code == 400 and "must name a principal" in r.json()["error"]["message"]
    assert lake.call("GET", "/namespaces/sales/views/v_ghost", "engine").status_code == 404
    r = lake.call("POST", "/namespaces/sales/views", "engine", view_body("v_mine", "SELECT id FROM orders"))
    assert r.status_code == 200
    for owner in ("ghost", "", " "):
        upd = {"updates": [{"action": "set-properties", "updates": {OWNER: owner}}]}
        r = lake.call("POST", "/namespaces/sales/views/v_mine", "engine", upd)
        assert r.status_code == 400, (owner, r.text)
    upd = {"updates": [{"action": "set-properties", "updates": {OWNER: "bob"}}]}
    assert lake.call("POST", "/namespaces/sales/views/v_mine", "engine", upd).status_code == 200


# ---------------------------------------------------------------- trust rules at start-up
POLICY_MANY = """
principals:
  - {name: alice, type: user}
  - {name: bob, type: user}
"""


@pytest.mark.parametrize(
    "rule",
    [{"audience": "lakesession"}, {"audiences": ["trino", "lakesession"]}, {}, {"issuer": None, "subject": []}],
)
def test_trust_everyone_rule_is_refused_at_start(tmp_path: Any, rule: dict[str, Any]) -> None:
    with pytest.raises(TrustConfigurationError, match="matches every token"):
        start(data_dir=tmp_path, bootstrap=bootstrap.parse(POLICY_MANY), trusted_engines=[rule])
    # explicitly single-user does not help when several principals exist
    with pytest.raises(TrustConfigurationError, match="single_user=True, but the catalog has 2 principals"):
        start(data_dir=tmp_path / "b", bootstrap=bootstrap.parse(POLICY_MANY), trusted_engines=[rule], single_user=True)


def test_named_engines_still_start(tmp_path: Any) -> None:
    rules = [{"principal": "engine"}, {"issuer": "https://idp.example", "audience": "lakesession"}]
    with start(data_dir=tmp_path, bootstrap=bootstrap.parse(POLICY_MANY), trusted_engines=rules) as handle:
        assert handle.settings.trusted_engines == rules


def test_embedded_single_user_still_trusts_its_engine(tmp_path: Any) -> None:
    from lakesession import embedded

    emb = embedded.start_embedded(tmp_path, storage="file")
    try:
        assert emb.handle.settings.single_user
        h = {"Authorization": f"Bearer {emb.handle.admin.token_for(embedded.DEMO_USER)}"}
        url = f"{emb.uri}{P}"
        assert httpx.post(f"{url}/namespaces", json={"namespace": ["sales"]}, headers=h).status_code == 200
        r = httpx.post(f"{url}/namespaces/sales/tables", json={"name": "orders", "schema": SCHEMA}, headers=h)
        assert r.status_code == 200, r.text
        body = view_body("v_orders", "SELECT id FROM orders", embedded.DEMO_USER)
        assert httpx.post(f"{url}/namespaces/sales/views", json=body, headers=h).status_code == 200
        since = time.time() - 0.001
        r = httpx.get(f"{url}/namespaces/sales/tables/orders?referenced-by={CHAIN}", headers=h)
        assert r.status_code == 200, r.text
        steps = [x.securable for x in emb.handle.admin.audit(since=since) if x.detail and "step" in x.detail]
        assert steps == ["view sales.v_orders", "table sales.orders"]  # the chain was honoured
    finally:
        with embedded._lock:
            for key in [k for k, v in embedded._running.items() if v is emb]:
                embedded._running.pop(key).handle.stop()
