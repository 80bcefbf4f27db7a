"""Lakekeeper's answers, met by the same errors as any catalog's: an unknown warehouse is a ``ConfigError``
naming it, a missing table one line naming the table (Lakekeeper's own message does not).

Lakekeeper does not run here (a ~30 min Rust build), so a loopback double replays what Lakekeeper 0.13.3
answered on these machines (``tests/recordings.py``, from ../shared/notes/lakekeeper-0.13.3.md) at its paths:
catalog base ``{host}/catalog``, warehouse by name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pyiceberg.exceptions import NoSuchTableError

import lakesession
from lakesession.errors import ConfigError
from tests.client.test_capabilities import _serve
from tests.recordings import LAKEKEEPER_NO_SUCH_TABLE, LAKEKEEPER_NO_SUCH_WAREHOUSE, Recorded

WAREHOUSE = "demo"
PREFIX = "0195c0a1-7a1e-7c3e-9f00-000000000001"  # Lakekeeper's prefix: the warehouse's id


def _replay(recorded: Recorded) -> JSONResponse:
    return JSONResponse(recorded.body, status_code=recorded.status)


def lakekeeper_like(base: str) -> FastAPI:
    """Lakekeeper's /v1/config (one warehouse, by name) and its 404 for a table it does not hold."""
    app = FastAPI()

    @app.get("/catalog/v1/config")
    async def config(warehouse: str = "") -> JSONResponse:
        if warehouse != WAREHOUSE:
            return _replay(LAKEKEEPER_NO_SUCH_WAREHOUSE)
        return JSONResponse({"defaults": {}, "overrides": {"prefix": PREFIX}, "endpoints": []})

    @app.get(f"/catalog/v1/{PREFIX}/namespaces/{{ns}}/tables/{{table}}")
    async def load(ns: str, table: str) -> JSONResponse:
        return _replay(LAKEKEEPER_NO_SUCH_TABLE)

    return app


@pytest.fixture(scope="module")
def lakekeeper() -> Iterator[str]:
    yield from _serve(lakekeeper_like)


def test_an_unknown_warehouse_is_a_config_error_naming_it(lakekeeper: str) -> None:
    session = lakesession.connect(uri=f"{lakekeeper}/catalog", warehouse="nosuchwh", token="lk-token")
    with pytest.raises(ConfigError) as caught:
        session.table("sales.orders")
    message = str(caught.value)
    assert "\n" not in message and "no warehouse 'nosuchwh'" in message and f"{lakekeeper}/catalog" in message
    assert "A warehouse 'nosuchwh' does not exist" in message  # Lakekeeper's own words ride along
    assert "Fix: check warehouse=" in message and "lk-token" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # one line, no pyiceberg chain


def test_a_missing_table_names_the_table_lakekeeper_does_not(lakekeeper: str) -> None:
    session = lakesession.connect(uri=f"{lakekeeper}/catalog", warehouse=WAREHOUSE, token="lk-token")
    with pytest.raises(NoSuchTableError) as caught:  # still pyiceberg's class: code catching it keeps working
        session.table("sales.orders")
    message = str(caught.value)
    assert "Error getting tabular from catalog" in message and "sales.orders" in message
    assert "\n" not in message and "Fix:" in message
