"""Client-side view chain resolution (``lakesession.catalog._chains``) against the reference catalog."""

from __future__ import annotations

from typing import Any

import pytest

from lakesession.catalog._chains import (
    ChainNode,
    ViewChainError,
    chain_tree,
    encode_referenced_by,
    references,
)
from lakesession.reference.viewsecurity import parse_referenced_by
from tests._lake import Lake
from tests.factories import make_catalog
from tests.support import policy, seed_chain_grants, view_body

POLICY = policy(
    users=["alice", "bob", "carol", "dave", "erin"],
    services={"admin": "r_admin"},
    grants=seed_chain_grants("sales")
    + """\
  - {role: r_admin, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
  # missing grant: alice -> v_dave (DEFINER dave) -> orders; dave may read views of sales but not orders
  - {role: r_alice, privilege: VIEW_READ, on: view sales.v_dave}
  - {role: r_dave, privilege: VIEW_READ, on: namespace sales}
  # intermediate deny: erin -> v_top (INVOKER) -> v_hidden (no grant); erin reads every table of sales
  - {role: r_erin, privilege: VIEW_READ, on: view sales.v_top}
  - {role: r_erin, privilege: TABLE_READ_DATA, on: namespace sales}
  - {role: r_erin, privilege: VIEW_READ, on: view sales.eu.v_eu}
  # cycles and default namespaces: alice reads everything in loops / other
  - {role: r_alice, privilege: VIEW_READ, on: namespace loops}
  - {role: r_alice, privilege: VIEW_READ, on: namespace other}
  - {role: r_alice, privilege: TABLE_READ_DATA, on: namespace other}
""",
)


def resolve(lake: Lake, who: str, name: str, **kw: Any) -> ChainNode:
    """``name``'s chain tree as ``who`` resolves it (tests/support.py helpers)."""
    tok = lake.handle.admin.token_for(who)
    return chain_tree(lake.catalog_as(who), name, token=lambda: tok, uri=lake.handle.uri, **kw)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    with make_catalog(
        POLICY,
        data_dir=tmp_path_factory.mktemp("chains"),
        trusted_engines=[{"principal": ["alice", "bob", "carol", "dave", "erin", "admin"]}],
    ) as handle:
        lk = Lake(handle)
        admin = lk.catalog_as("admin")
        schema = Schema(NestedField(1, "id", LongType(), required=False))
        for ns in ("sales", "loops", "other"):
            admin.create_namespace(ns)
        admin.create_namespace(("sales", "eu"))
        for t in ("sales.t_chain", "sales.orders", "other.events"):
            admin.create_table(t, schema)
        for body in (
            view_body("v1", "SELECT * FROM v2", "bob"),
            view_body("v2", "SELECT id FROM sales.v3 WHERE id > 0"),
            view_body("v3", "WITH recent AS (SELECT id FROM t_chain) SELECT r.id FROM recent r", "carol"),
            view_body("v_dave", "SELECT id FROM sales.orders", "dave", dialect="trino"),
            view_body("v_top", "SELECT * FROM v_hidden", dialect="flink"),
            view_body("v_hidden", "SELECT id FROM orders"),
        ):
            lk.create_view("sales", body)
        eu = view_body("v_eu", "SELECT id FROM v_eu_t")  # unqualified: the two-level default namespace
        eu["view-version"]["default-namespace"] = ["sales", "eu"]
        lk.create_view("sales%1Feu", eu)
        admin.create_table("sales.eu.v_eu_t", schema)
        lk.create_view("loops", view_body("a", "SELECT * FROM b", namespace="loops"))
        lk.create_view("loops", view_body("b", "SELECT * FROM loops.a JOIN other.events e ON true", namespace="loops"))
        lk.create_view(
            "other",
            view_body(
                "unq",
                "SELECT id FROM events UNION ALL SELECT id FROM remote.db.t UNION ALL SELECT id FROM lake.other.events",
                namespace="other",
                default_catalog="lake",
            ),
        )
        lk.create_view("other", view_body("weird<b>", "SELECT id FROM events", namespace="other"))
        yield lk


# ---------------------------------------------------------------- referenced-by (no server)
def test_encode_round_trip() -> None:
    chains = [
        [(("db",), "v")],
        [(("prod", "analytics"), "quarterly_view"), (("prod", "analytics"), "monthly_view")],
        [(("db",), "a,b"), (("d,b", "x y"), "c+d%e")],
        [(("ns",), "ünï"), (("a", "b", "c"), "v")],
    ]
    for chain in chains:
        raw = encode_referenced_by(chain)
        assert parse_referenced_by(raw) == chain
        assert parse_referenced_by(encode_referenced_by(chain, ":"), ":") == chain
        assert parse_referenced_by(encode_referenced_by(chain, "\x1f"), "\x1f") == chain
    assert encode_referenced_by([(("db",), "a,b"), (("db",), "c")]) == "db%1Fa%2Cb,db%1Fc"
    assert encode_referenced_by([]) == ""
    with pytest.raises(ViewChainError):
        encode_referenced_by([((), "v")])


def test_references_exclude_ctes_and_functions() -> None:
    sql = (
        "WITH a AS (SELECT * FROM db.x), b AS (SELECT * FROM a) "
        "SELECT * FROM b JOIN y ON true JOIN cat.ns.z ON true, LATERAL VIEW explode(array(1)) t AS c"
    )
    assert sorted(references(sql, "spark")) == [["cat", "ns", "z"], ["db", "x"], ["y"]]
    assert references('SELECT * FROM "s"."t"', "trino") == [["s", "t"]]
    assert references("SELECT * FROM t", "no-such-dialect") == [["t"]]
    with pytest.raises(ViewChainError):
        references("SELECT FROM WHERE (", "spark")


# ---------------------------------------------------------------- resolution
def test_mixed_chain(lake: Lake) -> None:
    tree = resolve(lake, "alice", "sales.v1")
    rows = [
        (r["depth"], r["object"], r["kind"], r["security"], r["owner"], r["user_in_effect"], r["decision"])
        for r in tree.to_rows()
    ]
    assert rows == [
        (0, "sales.v1", "view", "DEFINER", "bob", "alice", "allow"),
        (1, "sales.v2", "view", "INVOKER", None, "bob", "allow"),
        (2, "sales.v3", "view", "DEFINER", "carol", "bob", "allow"),
        (3, "sales.t_chain", "table", None, None, "carol", "allow"),  # the CTE "recent" is not a table
    ]
    assert tree.to_rows()[3]["parent"] == "sales.v3"
    text = repr(tree)
    assert text.splitlines()[0].startswith("sales.v1 [view, DEFINER owner=bob, as alice, allow]")
    assert "      └─ sales.t_chain [table, as carol, allow]" in text
    # bob starting the chain himself is checked as bob on v1: denied, no children; refused both as a
    # view and as a table, the catalog does not say which it is
    denied = resolve(lake, "bob", "sales.v1")
    assert (denied.kind, denied.decision, denied.children) == ("unknown", "deny", [])


def test_missing_grant_is_a_deny_node(lake: Lake) -> None:
    tree = resolve(lake, "alice", "sales.v_dave")
    assert (tree.security, tree.owner, tree.decision) == ("DEFINER", "dave", "allow")
    [orders] = tree.children
    assert (orders.object, orders.kind, orders.user_in_effect, orders.decision) == (
        "sales.orders",
        "table",
        "dave",
        "deny",
    )
    lake.handle.admin.grant("r_dave", "TABLE_READ_DATA", "table sales.orders")
    try:
        assert resolve(lake, "alice", "sales.v_dave").children[0].decision == "allow"
    finally:
        lake.handle.admin.revoke("r_dave", "TABLE_READ_DATA", "table sales.orders")


def test_intermediate_view_denied(lake: Lake) -> None:
    tree = resolve(lake, "erin", "sales.v_top")  # dialect "flink" is parsed as spark
    assert (tree.security, tree.user_in_effect, tree.decision) == ("INVOKER", "erin", "allow")
    [hidden] = tree.children
    assert (hidden.object, hidden.kind, hidden.decision, hidden.children) == ("sales.v_hidden", "view", "deny", [])
    # a table loaded directly is a one-node tree; a missing name is "missing"
    assert resolve(lake, "erin", "sales.orders").to_rows()[0]["decision"] == "allow"
    gone = resolve(lake, "alice", "other.nope")  # alice may read views and tables of other
    assert (gone.kind, gone.decision) == ("table", "missing")


def test_multi_level_namespace(lake: Lake) -> None:
    tree = resolve(lake, "erin", "sales.eu.v_eu")
    assert [(r["object"], r["kind"], r["decision"]) for r in tree.to_rows()] == [
        ("sales.eu.v_eu", "view", "allow"),
        ("sales.eu.v_eu_t", "table", "allow"),
    ]


def test_cycle_raises(lake: Lake) -> None:
    with pytest.raises(ViewChainError) as e:
        resolve(lake, "alice", "loops.a")
    assert "loops.a → loops.b → loops.a" in str(e.value) and "break the cycle" in str(e.value)


def test_depth_limit(lake: Lake) -> None:
    with pytest.raises(ViewChainError) as e:
        resolve(lake, "alice", "sales.v1", max_depth=2)
    assert "deeper than 2" in str(e.value)


def test_default_namespace_and_catalogs(lake: Lake) -> None:
    tree = resolve(lake, "alice", "other.unq")
    rows = [(c.object, c.kind, c.decision) for c in tree.children]
    assert rows == [
        ("other.events", "table", "allow"),
        ("remote.db.t", "external", None),
        ("other.events", "table", "allow"),
    ]


def test_html_escapes(lake: Lake) -> None:
    tree = resolve(lake, "alice", "other.weird<b>")
    html = tree._repr_html_()
    assert "weird&lt;b&gt;" in html and "weird<b>" not in html
    assert html.count("<ul") == 2 and "other.events" in html
    node = ChainNode("<script>x</script>", "table", None, None, "a&b", "deny", note='"q"')
    out = node._repr_html_()
    assert "<script>" not in out and "a&amp;b" in out and "&quot;q&quot;" in out


def test_session_resolve_is_wired(catalog) -> None:  # type: ignore[no-untyped-def]
    """``Session.resolve`` reaches the same resolver (a plain table is a one-node tree)."""
    import lakesession
    from tests.conftest import SECRETS, rest_catalog

    etl = rest_catalog(catalog, "etl")
    if ("wired",) not in etl.list_namespaces():
        etl.create_namespace("wired")
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    etl.create_table(("wired", "t"), Schema(NestedField(1, "x", LongType(), required=False)))
    s = lakesession.connect(
        uri=catalog.uri,
        credential=f"etl:{SECRETS['etl']}",
        token_url=f"{catalog.issuer_uri}/token",
        warehouse="lakesession",
    )
    tree = s.resolve("wired.t")
    assert tree.kind == "table" and tree.decision == "allow" and tree.children == []


def test_a_refusal_says_whether_the_chain_was_ignored_and_what_to_do() -> None:
    from lakesession.catalog._chains import chain_hint

    own = (
        "Principal 'alice' is not authorized for load_table on table sales.orders (TABLE_READ_DATA required); "
        "referenced-by was ignored because 'alice' is not a trusted engine of this catalog"
    )
    assert "engine='sc://" in chain_hint(own)
    engine = own.replace("'alice' is not a trusted", "'engine' (acting for 'alice') is not a trusted")
    assert "trusted_engines" in chain_hint(engine) and "sc://" not in chain_hint(engine)
    plain = "Principal 'alice' is not authorized for load_table on table sales.orders"
    assert chain_hint(plain) == plain
    assert chain_hint(chain_hint(own)) == chain_hint(own)  # said once
