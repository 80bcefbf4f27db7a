"""View security: DEFINER/INVOKER view chains via ``referenced-by``, trusted engines, protected owner property.

Catalog ``lake`` trusts the engine and, by name, the users whose requests the tests send as if
through a trusted engine (a rule matching every token is refused in a multi-user catalog), and
vends credentials from the S3 emulator; catalog ``strict`` trusts only ``spark-engine`` (and a
rule for another issuer), so alice's ``referenced-by`` is ignored and she may not touch the owner
property.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from lakesession.reference.errors import BadRequest
from lakesession.reference.settings import ServerSettings
from lakesession.reference.viewsecurity import (
    MAX_CHAIN,
    is_trusted,
    parse_referenced_by,
)
from tests.factories import make_catalog
from tests.recordings import LAKEKEEPER_PROTECTED_OWNER
from tests.support import OWNER, SCHEMA, policy, seed_chain_grants
from tests.support import view_body as support_view_body

P = "/v1/lakesession"
POLICY = policy(
    users=["alice", "bob", "carol", "dave"],
    services={"spark-engine": "engine"},
    grants="""\
  - {role: engine, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
  # example 1: INVOKER view inv over t_inv
  - {role: r_alice, privilege: VIEW_READ, on: view db.inv}
  - {role: r_alice, privilege: TABLE_READ_DATA, on: table db.t_inv}
  - {role: r_bob, privilege: VIEW_READ, on: view db.inv}
  # example 2: DEFINER view def_bob (owner bob) over t_def
  - {role: r_alice, privilege: VIEW_READ, on: view db.def_bob}
  - {role: r_bob, privilege: TABLE_READ_DATA, on: table db.t_def}
"""
    + seed_chain_grants("db")
    + """\
  # a DEFINER view whose owner is nobody
  - {role: r_alice, privilege: VIEW_READ, on: view db.ghost}
  # strict catalog: alice may create and alter views, and read t_inv
  - {role: r_dave, privilege: VIEW_CREATE, on: namespace db}
  - {role: r_dave, privilege: VIEW_WRITE_PROPERTIES, on: namespace db}
""",
)


def view_body(
    name: str, owner: str | None = None, sql: str = "SELECT * FROM somewhere", **props: str
) -> dict[str, Any]:
    """A trino view in ``db`` (the server parses its SQL for referenced-by links): ``tests.support.view_body``."""
    return support_view_body(name, sql, owner=owner, namespace="db", dialect="trino", properties=props)


class Api:
    def __init__(self, handle: Any):
        self.handle = handle

    def call(
        self, method: str, path: str, who: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        h = {"Authorization": f"Bearer {self.handle.admin.token_for(who)}", **(headers or {})}
        return httpx.request(method, f"{self.handle.uri}{P}{path}", headers=h, json=body, timeout=30)

    def load_table(self, who: str, table: str, chain: str | None = None, **headers: str) -> httpx.Response:
        q = f"?referenced-by={chain}" if chain is not None else ""
        return self.call("GET", f"/namespaces/db/tables/{table}{q}", who, headers=headers)

    def audit_since(self, since: float) -> list[Any]:
        return [
            r
            for r in self.handle.admin.audit(since=since)
            if r.action in ("load_table", "load_view", "load_credentials", "vend_credentials", "refresh_credentials")
        ]


def setup_content(api: Api, views: list[tuple[str, str | None, str]], tables: list[str]) -> None:
    assert api.call("POST", "/namespaces", "spark-engine", {"namespace": ["db"]}).status_code == 200
    for t in tables:
        r = api.call("POST", "/namespaces/db/tables", "spark-engine", {"name": t, "schema": SCHEMA})
        assert r.status_code == 200, r.text
    for name, owner, sql in views:
        r = api.call("POST", "/namespaces/db/views", "spark-engine", view_body(name, owner, sql))
        assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with make_catalog(
        POLICY,
        bucket="vs-bucket",
        data_dir=tmp_path_factory.mktemp("lake"),
        trusted_engines=[{"principal": "spark-engine"}, {"principal": ["alice", "bob", "carol"]}],
    ) as handle:
        api = Api(handle)
        setup_content(
            api,
            [
                ("inv", None, "SELECT id FROM t_inv"),
                ("def_bob", "bob", "SELECT id FROM db.t_def"),
                ("v1", "bob", "SELECT * FROM v2"),
                ("v2", None, "SELECT id FROM db.v3 WHERE id > 0"),
                ("v3", "carol", "WITH recent AS (SELECT id FROM t_chain) SELECT id FROM recent"),
                ("ghost", "dave", "SELECT id FROM t_def"),
            ],
            ["t_inv", "t_def", "t_chain"],
        )
        handle.services.directory.delete_principal("dave")  # ghost's owner no longer resolves
        yield api


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with make_catalog(
        POLICY,
        data_dir=tmp_path_factory.mktemp("strict"),
        trusted_engines=[
            {"principal": "spark-engine"},
            {"issuer": "https://elsewhere.example", "audience": "lakesession"},
        ],
        view_owner_property=OWNER,
    ) as handle:
        api = Api(handle)
        setup_content(
            api, [("inv", None, "SELECT id FROM t_inv"), ("def_bob", "bob", "SELECT id FROM t_def")], ["t_inv", "t_def"]
        )
        yield api


def steps(records: list[Any], action: str) -> list[tuple[str, str, str, bool]]:
    """(securable, user in effect, decision, delegated) of each chain step."""
    return [
        (r.securable, r.detail["user_in_effect"], r.decision, r.detail["delegated"])
        for r in records
        if r.action == action and r.decision in ("allow", "deny") and r.detail and "step" in r.detail
    ]


def allowed_steps(lake: Api, action: str, call: Callable[[], httpx.Response]) -> list[tuple[str, str, str, bool]]:
    """``call`` must answer 200; the chain steps of ``action`` it left in the audit log."""
    since = time.time() - 0.001
    r = call()
    assert r.status_code == 200, r.text
    return steps(lake.audit_since(since), action)


# ---------------------------------------------------------------- parsing and trust (no server)
def test_parse_referenced_by() -> None:
    assert parse_referenced_by("db%1Fv") == [(("db",), "v")]
    assert parse_referenced_by("prod%1Fanalytics%1Fquarterly_view,prod%1Fanalytics%1Fmonthly_view") == [
        (("prod", "analytics"), "quarterly_view"),
        (("prod", "analytics"), "monthly_view"),
    ]
    assert parse_referenced_by("db%1Fa%2Cb,db%1Fc") == [(("db",), "a,b"), (("db",), "c")]
    assert parse_referenced_by("db\x1fv", "\x1f") == [(("db",), "v")]
    assert parse_referenced_by("a:b:v", ":") == [(("a", "b"), "v")]
    assert parse_referenced_by("") == []
    assert parse_referenced_by("a.b%1Fv") == [(("a.b",), "v")]  # a level may contain "."
    assert len(parse_referenced_by(",".join(["db%1Fv"] * MAX_CHAIN))) == MAX_CHAIN
    with pytest.raises(BadRequest) as e:
        parse_referenced_by(",".join(["db%1Fv"] * (MAX_CHAIN + 1)))
    assert e.value.type == "TooManyViewsInChainException"
    for bad in ("v", "db%1F", "%1Fv", "db%1Fv,", "db%1Fv,,db%1Fw", "..%1Fv", "db%1Fv%2Fx"):
        with pytest.raises(BadRequest) as e:
            parse_referenced_by(bad)
        assert e.value.type == "BadRequestException", bad


def test_is_trusted_rules() -> None:
    s = ServerSettings(
        warehouse="file:///x",
        db_url="sqlite://",
        trusted_engines=[
            {"principal": "spark-engine"},
            {"issuer": "https://idp", "audience": "trino"},
            {"issuer": "https://idp", "subject": ["svc-1"]},
            {"issuer": "https://idp"},  # no audience/subject: never matches
        ],
    )
    assert is_trusted({}, "spark-engine", s)
    assert not is_trusted({"iss": "https://idp", "aud": "lakesession", "sub": "x"}, "x", s)
    assert is_trusted({"iss": "https://idp", "aud": ["lakesession", "trino"], "sub": "x"}, "x", s)
    assert is_trusted({"iss": "https://idp", "aud": "trino"}, "x", s)
    assert not is_trusted({"iss": "https://other", "aud": "trino"}, "x", s)
    assert is_trusted({"iss": "https://idp", "aud": "lakesession", "sub": "svc-1"}, "svc-1", s)
    assert not is_trusted({"iss": "https://other", "sub": "svc-1"}, "svc-1", s)
    assert not is_trusted(
        {"iss": "https://idp", "aud": "trino"}, "x", ServerSettings(warehouse="file:///x", db_url="sqlite://")
    )


# ---------------------------------------------------------------- the three examples
def test_invoker_view_needs_view_and_table(lake: Api) -> None:
    assert allowed_steps(lake, "load_table", lambda: lake.load_table("alice", "t_inv", "db%1Finv")) == [
        ("view db.inv", "alice", "allow", False),
        ("table db.t_inv", "alice", "allow", False),
    ]
    # bob may read the view but not the table; carol the reverse (she lacks the view)
    for who in ("bob", "carol"):
        r = lake.load_table(who, "t_inv", "db%1Finv")
        assert r.status_code == 403 and r.json()["error"]["type"] == "ForbiddenException"
        assert "metadata" not in r.text and "location" not in r.text


def test_definer_view_checks_owner_on_table(lake: Api) -> None:
    assert lake.load_table("alice", "t_def").status_code == 403  # no direct table access
    since = time.time() - 0.001
    ok = lake.load_table("alice", "t_def", "db%1Fdef_bob")
    assert ok.status_code == 200, ok.text
    assert ok.json()["metadata"]["format-version"] in (1, 2)
    records = lake.audit_since(since)
    assert steps(records, "load_table") == [
        ("view db.def_bob", "alice", "allow", False),
        ("table db.t_def", "bob", "allow", True),
    ]
    step = next(r for r in records if r.securable == "table db.t_def" and r.decision == "allow")
    assert step.principal == "alice" and step.detail["chain"] == ["db.def_bob"]
    assert step.detail["privilege"] == "TABLE_READ_PROPERTIES"
    issued = next(r for r in records if r.action == "load_table" and r.decision == "issued")
    assert issued.detail["delegated"] is True and issued.detail["user_in_effect"] == "bob"
    # carol lacks the view: denied even though bob could read the table
    r = lake.load_table("carol", "t_def", "db%1Fdef_bob")
    assert r.status_code == 403 and "step 1" in r.json()["error"]["message"]
    # bob losing the table denies alice too (all or nothing), naming the target step
    lake.handle.admin.revoke("r_bob", "TABLE_READ_DATA", "table db.t_def")
    try:
        r = lake.load_table("alice", "t_def", "db%1Fdef_bob")
        assert r.status_code == 403 and "target" in r.json()["error"]["message"]
    finally:
        lake.handle.admin.grant("r_bob", "TABLE_READ_DATA", "table db.t_def")


def test_mixed_chain(lake: Api) -> None:
    chain = "db%1Fv1,db%1Fv2,db%1Fv3"
    since = time.time() - 0.001
    ok = lake.load_table("alice", "t_chain", chain)
    assert ok.status_code == 200, ok.text
    records = lake.audit_since(since)
    assert steps(records, "load_table") == [
        ("view db.v1", "alice", "allow", False),
        ("view db.v2", "bob", "allow", True),
        ("view db.v3", "bob", "allow", True),
        ("table db.t_chain", "carol", "allow", True),
    ]
    assert all(r.detail["chain"] == ["db.v1", "db.v2", "db.v3"] for r in records if r.decision == "allow")
    assert [r.detail.get("security") for r in records if r.securable.startswith("view")] == [
        "definer",
        "invoker",
        "definer",
    ]
    # alice herself cannot read v2, v3 or the table
    assert lake.load_table("alice", "t_chain").status_code == 403
    assert lake.load_table("alice", "t_chain", "db%1Fv3").status_code == 403
    lake.handle.admin.revoke("r_bob", "VIEW_READ", "view db.v3")
    try:
        since = time.time() - 0.001
        r = lake.load_table("alice", "t_chain", chain)
        assert r.status_code == 403 and "step 3 (view db.v3)" in r.json()["error"]["message"]
        assert "table db.t_chain" not in r.text or "metadata" not in r.text
        decisions = [(s[0], s[2]) for s in steps(lake.audit_since(since), "load_table")]
        assert decisions == [
            ("view db.v1", "allow"),
            ("view db.v2", "allow"),
            ("view db.v3", "deny"),
            ("table db.t_chain", "allow"),
        ]
        assert not any(r.decision == "issued" for r in lake.audit_since(since))
    finally:
        lake.handle.admin.grant("r_bob", "VIEW_READ", "view db.v3")


def test_load_view_through_chain(lake: Api) -> None:
    assert lake.call("GET", "/namespaces/db/views/v2", "alice").status_code == 403
    assert allowed_steps(
        lake, "load_view", lambda: lake.call("GET", "/namespaces/db/views/v2?referenced-by=db%1Fv1", "alice")
    ) == [
        ("view db.v1", "alice", "allow", False),
        ("view db.v2", "bob", "allow", True),
    ]


def test_chain_errors(lake: Api) -> None:
    r = lake.load_table("alice", "t_def", ",".join(["db%1Fdef_bob"] * 11))
    assert r.status_code == 400 and r.json()["error"]["type"] == "TooManyViewsInChainException"
    r = lake.load_table("alice", "t_def", "def_bob")
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestException"
    # a missing view answers 403 like a denied one (no existence leak)
    missing = lake.load_table("alice", "t_def", "db%1Fnope")
    denied = lake.load_table("carol", "t_def", "db%1Fdef_bob")
    assert missing.status_code == denied.status_code == 403
    assert "or view not found" in missing.json()["error"]["message"]
    # an owner naming no principal: 403 with a clear message
    r = lake.load_table("alice", "t_def", "db%1Fghost")
    assert r.status_code == 403 and r.json()["error"]["type"] == "ForbiddenException"
    assert "does not resolve to a principal" in r.json()["error"]["message"]


def test_credentials_through_definer_chain(lake: Api) -> None:
    deleg = {"X-Iceberg-Access-Delegation": "vended-credentials"}
    since = time.time() - 0.001
    r = lake.load_table("alice", "t_def", "db%1Fdef_bob", **deleg)
    assert r.status_code == 200, r.text
    [cred] = r.json()["storage-credentials"]
    assert cred["prefix"].endswith("/db/t_def") and cred["config"]["s3.session-token"]
    vended = next(x for x in lake.audit_since(since) if x.action == "vend_credentials")
    assert vended.principal == "alice" and vended.detail["mode"] == "read"
    assert vended.detail["delegated"] is True and vended.detail["chain"] == ["db.def_bob"]
    assert vended.detail["user_in_effect"] == "bob"

    url = "/namespaces/db/tables/t_def/credentials"
    assert lake.call("GET", url, "alice").status_code == 403
    since = time.time() - 0.001
    r = lake.call("GET", url + "?referenced-by=db%1Fdef_bob", "alice")
    assert r.status_code == 200 and r.json()["storage-credentials"], r.text
    records = lake.audit_since(since)
    assert steps(records, "load_credentials") == [
        ("view db.def_bob", "alice", "allow", False),
        ("table db.t_def", "bob", "allow", True),
    ]
    refreshed = next(x for x in records if x.action == "refresh_credentials")
    assert refreshed.detail["delegated"] is True and refreshed.detail["chain"] == ["db.def_bob"]
    # mixed chain: credentials carry carol's privilege (read)
    r = lake.load_table("alice", "t_chain", "db%1Fv1,db%1Fv2,db%1Fv3", **deleg)
    assert r.status_code == 200 and r.json()["storage-credentials"]


# ---------------------------------------------------------------- untrusted callers
def test_untrusted_referenced_by_is_ignored(strict: Api) -> None:
    # the chain would let alice in (DEFINER bob), but she is not a trusted engine: INVOKER on the target
    r = strict.load_table("alice", "t_def", "db%1Fdef_bob")
    assert r.status_code == 403
    # ...and neither a malformed nor an oversized chain is an error
    since = time.time() - 0.001
    for chain in ("db%1Finv", "garbage", ",".join(["db%1Finv"] * 20)):
        assert strict.load_table("alice", "t_inv", chain).status_code == 200
    records = [r for r in strict.audit_since(since) if r.action == "load_table"]
    assert records and all(not r.detail or "chain" not in r.detail for r in records)
    assert all(r.securable == "table db.t_inv" for r in records)
    # the trusted engine still gets chains honoured (and errors)
    r = strict.load_table("spark-engine", "t_def", ",".join(["db%1Fdef_bob"] * 11))
    assert r.json()["error"]["type"] == "TooManyViewsInChainException"


def test_owner_property_is_protected(strict: Api) -> None:
    views = "/namespaces/db/views"
    for key in (OWNER, "Trino.Run-As-Owner", "TRINO.RUN-AS-OWNER"):
        r = strict.call("POST", views, "dave", {**view_body("mine"), "properties": {key: "dave"}})
        # Lakekeeper's own answer, as recorded (the model this catalog follows): same status, same type
        recorded = LAKEKEEPER_PROTECTED_OWNER.body["error"]
        assert isinstance(recorded, dict) and r.status_code == LAKEKEEPER_PROTECTED_OWNER.status == 403, key
        assert r.json()["error"]["type"] == recorded["type"] == "ProtectedPropertyModification", key
    assert strict.call("POST", views, "dave", view_body("mine", comment="ok")).status_code == 200
    for update in (
        {"action": "set-properties", "updates": {OWNER: "dave"}},
        {"action": "set-properties", "updates": {"Trino.Run-As-Owner": "dave"}},
        {"action": "remove-properties", "removals": [OWNER]},
    ):
        r = strict.call("POST", f"{views}/mine", "dave", {"updates": [update]})
        assert r.status_code == 403 and r.json()["error"]["type"] == "ProtectedPropertyModification", update
    r = strict.call(
        "POST", f"{views}/def_bob", "dave", {"updates": [{"action": "remove-properties", "removals": [OWNER]}]}
    )
    assert r.status_code == 403 and r.json()["error"]["type"] == "ProtectedPropertyModification"
    ok = strict.call(
        "POST", f"{views}/mine", "dave", {"updates": [{"action": "set-properties", "updates": {"comment": "x"}}]}
    )
    assert ok.status_code == 200
    # the trusted engine may set and remove the exact key, but not a case variant
    eng = strict.call(
        "POST", f"{views}/mine", "spark-engine", {"updates": [{"action": "set-properties", "updates": {OWNER: "dave"}}]}
    )
    assert eng.status_code == 200 and eng.json()["metadata"]["properties"][OWNER] == "dave"
    r = strict.call(
        "POST",
        f"{views}/mine",
        "spark-engine",
        {"updates": [{"action": "set-properties", "updates": {"Trino.Run-As-Owner": "x"}}]},
    )
    assert r.status_code == 403 and r.json()["error"]["type"] == "ProtectedPropertyModification"
    eng = strict.call(
        "POST", f"{views}/mine", "spark-engine", {"updates": [{"action": "remove-properties", "removals": [OWNER]}]}
    )
    assert eng.status_code == 200 and OWNER not in eng.json()["metadata"]["properties"]
