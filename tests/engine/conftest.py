"""One catalog and one real ``lakesession engine`` for the whole ``tests/engine`` package (a JVM each).

``catalog``: a reference catalog on the S3 emulator trusting the ``engine`` principal, with etl's
``sales.orders`` (EU, US, APAC rows); ``engine``: the engine process; ``view``: bob's DEFINER view
``sales.v_eu``, created through the engine (trusted engines protect the owner property).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests._engine import ROWS, SECRETS, RunningEngine, create_definer_view, seed_policy, start_engine
from tests.factories import make_catalog, vended_catalog

TOKEN_TTL = 30


@pytest.fixture(scope="package")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with make_catalog(
        seed_policy(),
        bucket="lake-engine",
        data_dir=tmp_path_factory.mktemp("engine-catalog"),
        trusted_engines=[{"principal": "engine"}],
        access_token_ttl=TOKEN_TTL,  # short: users' and the engine's exchanged tokens are refreshed in the tests
    ) as handle:
        etl = vended_catalog(handle, "etl", f"etl:{SECRETS['etl']}")
        etl.create_namespace("sales")
        etl.create_table("sales.orders", schema=ROWS.schema).append(ROWS)
        yield handle


@pytest.fixture(scope="package")
def engine(catalog: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    with start_engine(catalog, tmp_path_factory.mktemp("engine")) as running:
        yield running


@pytest.fixture(scope="package")
def view(catalog: Any, engine: RunningEngine) -> str:
    return create_definer_view(catalog, engine)
