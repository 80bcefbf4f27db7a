"""Chain routes of the gateway and the query expansion, without Spark."""

from __future__ import annotations

from typing import Any

import pytest

from lakesession.catalog._chains import ViewChainError
from lakesession.catalog._expand import expand
from lakesession.gateway._app import rewrite_table_config
from lakesession.gateway._chains import ChainRoute, ChainRoutes, strip_referenced_by, with_referenced_by


def test_referenced_by_is_replaced_never_appended() -> None:
    assert strip_referenced_by("snapshots=refs&referenced-by=a%1Fv") == "snapshots=refs"
    assert strip_referenced_by("referenced%2Dby=x&a=1") == "a=1"
    assert (
        with_referenced_by("referenced-by=evil%1Fv&snapshots=refs", "db%1Fv1,db%1Fv2")
        == "snapshots=refs&referenced-by=db%1Fv1,db%1Fv2"
    )
    assert with_referenced_by("", "db%1Fa%2Cb") == "referenced-by=db%1Fa%2Cb"


def test_route_permits_only_its_tables_and_reads() -> None:
    route = ChainRoute("r1", ((("db",), "v"),), "db%1Fv", {(("db",), "t"), (("a", "b"), "u")})
    ok = [
        ("GET", "/v1/config"),
        ("GET", "/v1/wh/namespaces/db/tables/t"),
        ("HEAD", "/v1/wh/namespaces/db/tables/t"),
        ("GET", "/v1/wh/namespaces/db/tables/t/credentials"),
        ("POST", "/v1/wh/namespaces/db/tables/t/metrics"),
        ("GET", "/v1/wh/namespaces/a%1Fb/tables/u"),
        ("POST", "/v1/wh/namespaces/db/tables/t/sign"),
    ]
    no = [
        ("GET", "/v1/wh/namespaces/db/tables/t_other"),
        ("POST", "/v1/wh/namespaces/db/tables/t"),
        ("DELETE", "/v1/wh/namespaces/db/tables/t"),
        ("GET", "/v1/wh/namespaces/db/tables"),
        ("GET", "/v1/wh/namespaces/db/views/v"),
        ("POST", "/v1/wh/namespaces/db/tables/u/sign"),
        ("GET", "/v1/wh/namespaces"),
        ("POST", "/v1/wh/tables/rename"),
    ]
    assert all(route.permits(m, p)[0] for m, p in ok)
    assert not any(route.permits(m, p)[0] for m, p in no)
    assert route.display == "db.v"


def test_registry_reuses_a_chain_and_ids_are_random() -> None:
    routes = ChainRoutes()
    a = routes.register(((("db",), "v"),), "db%1Fv", {(("db",), "t")})
    b = routes.register(((("db",), "v"),), "db%1Fv", {(("db",), "u")})
    c = routes.register(((("db",), "w"),), "db%1Fw")
    assert a is b and a.tables == {(("db",), "t"), (("db",), "u")}
    assert c.id != a.id and len(a.id) == 16 and routes.get(a.id) is a and routes.get("nope") is None


def test_rewrite_points_every_catalog_url_at_the_gateway() -> None:
    body = (
        b'{"metadata-location":"s3://b/t/m.json","metadata":{},"config":{"s3.signer.uri":"http://cat:1",'
        b'"client.refresh-credentials-endpoint":"http://cat:1/v1/x/credentials","s3.endpoint":"http://s3:9"},'
        b'"storage-credentials":[{"prefix":"s3://b/t","config":{"client.refresh-credentials-endpoint":'
        b'"http://cat:1/v1/x/credentials?referenced-by=db%1Fv"}}]}'
    )
    import json

    doc = json.loads(rewrite_table_config(body, "http://cat:1", "http://gw:2/chain/r1"))
    assert doc["config"]["s3.signer.uri"] == "http://gw:2/chain/r1"
    assert doc["config"]["client.refresh-credentials-endpoint"] == "http://gw:2/chain/r1/v1/x/credentials"
    assert doc["config"]["s3.endpoint"] == "http://s3:9"
    assert doc["storage-credentials"][0]["config"]["client.refresh-credentials-endpoint"].startswith("http://gw:2/")
    assert (
        rewrite_table_config(b'{"config":{"u":"http://cat:10"}}', "http://cat:1", "http://gw")
        == b'{"config":{"u":"http://cat:10"}}'
    )  # a different port is not the catalog


class FakeViews:
    """The catalog's loadView answers for ``expand`` (pure function of the identifiers)."""

    def __init__(self, views: dict[str, str]):
        self.views = views
        self.calls: list[tuple[str, list[Any]]] = []

    def get(self, kind: str, ident: Any, chain: list[Any]) -> tuple[int, Any]:
        name = ".".join((*ident[0], ident[1]))
        self.calls.append((name, list(chain)))
        if name not in self.views:
            return 404, {}
        version = {
            "version-id": 1,
            "default-namespace": list(ident[0]),
            "representations": [{"type": "sql", "sql": self.views[name], "dialect": "spark"}],
        }
        return 200, {"metadata": {"current-version-id": 1, "versions": [version], "properties": {}}}


def _expand(views: dict[str, str], query: str, current: tuple[str, ...] | None = ("db",)) -> tuple[str, list[Any]]:
    pinned: list[Any] = []

    def chain_catalog(chain: Any, table: Any) -> str:
        pinned.append((chain, table))
        return f"lake__chain_{len(pinned)}"

    result = expand(
        query,
        client=FakeViews(views),
        catalog_name="lake",
        current_namespace=current,  # type: ignore[arg-type]
        chain_catalog=chain_catalog,
    )
    return result.sql, pinned


def test_expand_nested_views_pins_tables_per_chain() -> None:
    sql, pinned = _expand(
        {"db.v1": "SELECT id FROM v2 WHERE id > 1", "db.v2": "SELECT t.id FROM t JOIN other.u u ON true"},
        "SELECT x.id FROM lake.db.v1 x JOIN db.plain p ON x.id = p.id",
    )
    assert pinned == [
        (((("db",), "v1"), (("db",), "v2")), (("db",), "t")),
        (((("db",), "v1"), (("db",), "v2")), (("other",), "u")),
    ]
    assert sql == (
        "SELECT x.id FROM (SELECT id FROM (SELECT t.id FROM `lake__chain_1`.`db`.`t` AS t "
        "JOIN `lake__chain_2`.`other`.`u` AS u ON TRUE) AS v2 WHERE id > 1) AS x "
        # direct references run in the session's catalog, as the user
        "JOIN `lake`.`db`.`plain` AS p ON x.id = p.id"
    )


def test_expand_leaves_other_statements_and_catalogs_alone() -> None:
    assert (
        _expand({"db.v": "SELECT 1"}, "CREATE VIEW db.w AS SELECT * FROM db.v")[0]
        == "CREATE VIEW db.w AS SELECT * FROM db.v"
    )
    assert _expand({}, "SELECT * FROM spark_catalog.default.t")[0] == "SELECT * FROM spark_catalog.default.t"
    with pytest.raises(ViewChainError, match="internal view-chain catalog"):
        _expand({}, "SELECT * FROM lake__chain_abc.db.t")
    with pytest.raises(ViewChainError, match="cycle"):
        _expand({"db.a": "SELECT * FROM b", "db.b": "SELECT * FROM db.a"}, "SELECT * FROM db.a")


def test_a_scan_report_through_a_chain_is_answered_by_the_gateway() -> None:
    """Catalogs refuse every POST carrying referenced-by: the report stays in the gateway (nothing upstream,
    which here is a closed port: forwarding would answer 5xx)."""
    import httpx

    from lakesession.gateway import Gateway
    from tests.factories import free_port

    gw = Gateway(f"http://127.0.0.1:{free_port()}", lambda: "token").start()
    try:
        route = gw.chains.register(((("db",), "v"),), "db%1Fv", {(("db",), "t")})
        auth = {"Authorization": f"Bearer {gw.secret}"}
        url = f"{gw.uri}/chain/{route.id}/v1/wh/namespaces/db/tables/t/metrics"
        r = httpx.post(url, json={"report-type": "scan-report"}, headers=auth)
        assert r.status_code == 204
        other = httpx.post(url.replace("/t/metrics", "/u/metrics"), json={}, headers=auth)
        assert other.status_code == 403  # still only the chain's own tables
    finally:
        gw.stop()


def test_the_jvm_asks_whether_a_namespace_exists_with_a_get() -> None:
    """A refused HEAD has no body (Spark's ``USE`` said "Forbidden: Forbidden"); without the endpoint listed,
    Iceberg Java asks with GET, whose refusal carries the catalog's message. The rest of the answer is kept."""
    import json

    from lakesession.gateway._rewrite import NAMESPACE_EXISTS, without_namespace_head

    config = {
        "defaults": {"a": "b"},
        "overrides": {},
        "endpoints": [NAMESPACE_EXISTS, "GET /v1/{prefix}/namespaces/{namespace}"],
    }
    out = json.loads(without_namespace_head(json.dumps(config).encode()))
    assert out == {**config, "endpoints": ["GET /v1/{prefix}/namespaces/{namespace}"]}
    unlisted = b'{"defaults": {}, "overrides": {}}'
    assert without_namespace_head(unlisted) == unlisted
