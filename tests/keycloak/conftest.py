"""One real Keycloak per test module (``tests/_keycloak.py``): the ``kc`` fixture, realm ``lake`` imported."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._keycloak import Keycloak, keycloak


@pytest.fixture(scope="module")
def kc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keycloak]:
    with keycloak(tmp_path_factory.mktemp("keycloak")) as handle:
        yield handle
