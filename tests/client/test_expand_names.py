"""``expand`` resolves names as Spark does before expanding views (no JVM: a fake catalog answers).

EXPLAIN's statement is expanded like the statement itself; one- and two-part names resolve in the session's
current catalog and namespace (asked lazily, once, and only when such a name occurs); a name the catalog does
not know as written falls back to its lower-case form unless a table goes by the name as written.
"""

from __future__ import annotations

from typing import Any

from lakesession.catalog._expand import expand
from tests.client.test_gateway_chains import FakeViews


class FakeCatalog(FakeViews):
    """Views as in ``FakeViews``, and tables by name (everything else: 404, as the reference answers)."""

    def __init__(self, views: dict[str, str], tables: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        super().__init__(views)
        self.tables = tables

    def get(self, kind: str, ident: Any, chain: list[Any]) -> tuple[int, Any]:
        if kind == "tables":
            name = ".".join((*ident[0], ident[1]))
            self.calls.append((f"table {name}", list(chain)))
            return (200, {}) if name in self.tables else (404, {})
        return super().get(kind, ident, chain)


VIEWS = {"sales.v_eu": "SELECT id FROM sales.orders WHERE region = 'EU'"}


def run(
    query: str, where: Any = None, catalog: FakeCatalog | None = None, refuse: bool = True
) -> tuple[str, list[Any]]:
    pinned: list[Any] = []

    def chain_catalog(chain: Any, table: Any) -> str:
        pinned.append((chain, table))
        return "lake__chain_1"

    result = expand(
        query,
        client=catalog or FakeCatalog(VIEWS),
        catalog_name="lake",
        current_namespace=None,
        chain_catalog=chain_catalog,
        where=where,
        refuse_unreadable=refuse,
    )
    return result.sql, pinned


EXPANDED = "(SELECT id FROM `lake__chain_1`.`sales`.`orders` AS orders WHERE region = 'EU') AS v_eu"


def test_explain_expands_its_statement_in_every_mode() -> None:
    for explain in ("EXPLAIN", "explain extended", "EXPLAIN FORMATTED", "EXPLAIN\n COST"):
        sql, pinned = run(f"{explain} SELECT * FROM lake.sales.v_eu")
        assert sql == f"{explain} SELECT * FROM {EXPANDED}", sql
        assert pinned == [(((("sales",), "v_eu"),), (("sales",), "orders"))]
    assert run("EXPLAIN SELECT 1")[0] == "EXPLAIN SELECT 1"  # nothing to expand: the text as written
    assert run("EXPLAINED")[0] == "EXPLAINED"


def test_one_and_two_part_names_resolve_in_the_current_catalog_and_namespace() -> None:
    asked: list[int] = []

    def where(catalog: str = "lake", namespace: tuple[str, ...] = ("sales",)) -> Any:
        def ask() -> tuple[str, tuple[str, ...]]:
            asked.append(1)
            return catalog, namespace

        return ask

    assert run("SELECT * FROM v_eu", where())[0] == f"SELECT * FROM {EXPANDED}"
    assert run("SELECT * FROM v_eu JOIN sales.v_eu", where())[0].count("lake__chain_1") == 2
    assert len(asked) == 2  # once per expansion
    assert run("SELECT * FROM lake.sales.v_eu", where())[0] == f"SELECT * FROM {EXPANDED}"
    assert len(asked) == 2  # a qualified name needs no current namespace
    # another current catalog, the catalog's root, or another namespace: Spark resolves elsewhere, nothing expanded
    assert run("SELECT * FROM v_eu", where("spark_catalog", ("default",)))[0] == "SELECT * FROM v_eu"
    assert run("SELECT * FROM sales.v_eu", where("spark_catalog", ("default",)))[0] == "SELECT * FROM sales.v_eu"
    assert run("SELECT * FROM v_eu", where("lake", ()))[0] == "SELECT * FROM v_eu"
    assert "lake__chain" not in run("SELECT * FROM v_eu", where("lake", ("hr",)))[0]


def test_a_differently_cased_name_finds_the_view_unless_a_table_goes_by_it() -> None:
    where = lambda: ("lake", ("SALES",))  # noqa: E731  (a namespace set with USE in upper case)
    for query in ("SELECT * FROM SALES.V_EU", "SELECT * FROM lake.Sales.V_eu", "SELECT * FROM V_EU"):
        sql, _ = run(query, where)
        assert sql.endswith(EXPANDED.replace("AS v_eu", f"AS {query.rsplit('.', 1)[-1].split()[-1]}")), sql
    catalog = FakeCatalog(VIEWS, tables={"SALES.V_EU"})
    assert run("SELECT * FROM lake.SALES.V_EU", catalog=catalog)[0] == "SELECT * FROM lake.SALES.V_EU"
    assert ("table SALES.V_EU", []) in catalog.calls
    exact = FakeCatalog({**VIEWS, "SALES.V_EU": "SELECT 2 AS two"})
    assert "SELECT 2 AS two" in run("SELECT * FROM lake.SALES.V_EU", catalog=exact)[0]  # the name as written first


def test_a_statement_that_is_no_query_asks_nothing() -> None:
    """``USE lake.sales`` is about to move the session: resolving its names would ask where it is now."""
    asked: list[int] = []
    assert run("USE lake.sales", lambda: asked.append(1))[0] == "USE lake.sales"
    assert run("USE sales", lambda: asked.append(1))[0] == "USE sales"
    assert asked == []


class Refusing(FakeCatalog):
    """Refuses everything the way the reference catalog does (403 naming the privilege of each kind)."""

    def get(self, kind: str, ident: Any, chain: list[Any]) -> tuple[int, Any]:
        name = ".".join((*ident[0], ident[1]))
        privilege = "VIEW_READ" if kind == "views" else "TABLE_READ_PROPERTIES"
        self.calls.append((f"{kind} {name}", list(chain)))
        message = (
            f"Principal 'carol' is not authorized for load_{kind[:-1]} on {kind[:-1]} {name} ({privilege} required)"
        )
        return 403, {"error": {"message": message, "type": "ForbiddenException", "code": 403}}


def test_a_name_refused_as_a_view_and_as_a_table_says_both() -> None:
    """Spark asks for a table first and stops at its 403: a view the user may not read looked like a table."""
    import pytest

    from lakesession.errors import CatalogAccessError

    with pytest.raises(CatalogAccessError) as err:
        run("SELECT * FROM lake.sales.v_carol", catalog=Refusing({}))
    message = str(err.value)
    assert "view sales.v_carol (VIEW_READ required)" in message and "TABLE_READ_PROPERTIES" in message, message
    assert err.value.kind == "forbidden" and err.value.status == 403
    # the notebook's own Spark (no engine) meets the table's refusal itself, as before
    assert run("SELECT * FROM lake.sales.v_carol", catalog=Refusing({}), refuse=False)[0].endswith("v_carol")
    readable = FakeCatalog({}, tables={"sales.orders"})  # a table the user reads: not a view (404), no error
    assert run("SELECT * FROM lake.sales.orders", catalog=readable)[0] == "SELECT * FROM lake.sales.orders"


def test_temporary_views_stay_sparks_to_resolve() -> None:
    """A one-part name that is no view of the catalog may be a temporary view (Spark resolves those first), and
    ``global_temp.x`` is Spark's global temporary views: neither is pinned to the catalog."""
    where = lambda: ("lake", ("sales",))  # noqa: E731
    sql, _ = run("SELECT * FROM eu JOIN lake.sales.v_eu USING (id)", where)
    assert sql.startswith("SELECT * FROM eu JOIN (SELECT"), sql
    assert run("SELECT * FROM global_temp.bobs", where)[0] == "SELECT * FROM global_temp.bobs"
    assert "`lake`.`global_temp`" not in run("SELECT * FROM global_temp.bobs JOIN lake.sales.v_eu", where)[0]
    # refused as a view and as a table in the catalog, a one-part name may still be a temporary view: no error
    refusing = Refusing({})
    assert run("SELECT * FROM eu", where, catalog=refusing)[0] == "SELECT * FROM eu"
