"""The engine with an external OIDC issuer: users, the engine and the catalog all trust another issuer.

The issuer is a second reference catalog's embedded one (``tests.factories.make_catalog``: real discovery,
JWKS and RFC 8693 exchange over HTTP), standing in for a company IdP that supports delegation (``act``).
The catalog trusts it (``issuer_url``) and declares the ``engine`` principal a trusted engine; the engine
verifies users' tokens against that issuer and exchanges them there. alice gets exactly the EU rows.
"""

from __future__ import annotations

from pathlib import Path

from tests._engine import ENGINE_TESTS, EU, ROWS, SECRETS, create_definer_view, login, seed_policy, start_engine
from tests.factories import Policy, make_catalog, vended_catalog

pytestmark = ENGINE_TESTS


def directory_of(policy: Policy) -> Policy:
    """``policy`` without client secrets: the catalog knows the principals and grants, the issuer their logins."""
    bare = Policy(roles=policy.roles, grants=policy.grants, locations=policy.locations)
    for p in policy.principals:
        bare.principals.append({"name": p["name"], "type": p["type"]})
    return bare


def test_the_engine_works_with_an_external_issuer(tmp_path: Path) -> None:
    team = seed_policy()
    with (
        make_catalog(team, data_dir=tmp_path / "idp") as idp,
        make_catalog(
            directory_of(team),
            bucket="lake-engine-ext",
            data_dir=tmp_path / "catalog",
            issuer_url=idp.issuer_uri,
            trusted_engines=[{"principal": "engine"}],
        ) as catalog,
    ):
        assert catalog.issuer_uri == idp.issuer_uri
        etl = vended_catalog(catalog, "etl", f"etl:{SECRETS['etl']}")
        etl.create_namespace("sales")
        etl.create_table("sales.orders", schema=ROWS.schema).append(ROWS)
        with start_engine(catalog, tmp_path) as engine:
            create_definer_view(catalog, engine)
            alice = login(catalog, "alice", engine)
            try:
                rows = sorted((r["id"], r["amount"]) for r in alice.sql("SELECT * FROM lake.sales.v_eu").collect())
            finally:
                alice.close()
        assert rows == EU
        loads = [r for r in catalog.admin.audit(principal="alice") if "sales.orders" in r.securable]
        assert any(r.decision == "allow" and (r.detail or {}).get("actor") == "engine" for r in loads)
