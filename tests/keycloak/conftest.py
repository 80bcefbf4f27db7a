"""One real Keycloak for the session (``tests/_keycloak.py``), one realm of its own for each module.

A Keycloak start costs 45-80 s on CI's two cores, a realm created through the admin API a second or two. Each
module's ``kc`` is a fresh copy of ``docs/how-to/keycloak/lake-realm.json`` (new secrets, a name of its own),
deleted when the module ends: the modules change client lifespans, realm settings, group membership, mappers
and keys, and log users out, and none of that may reach the next module.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator

import pytest

from tests._keycloak import Keycloak, keycloak


@pytest.fixture(scope="session")
def kc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keycloak]:
    """The session's Keycloak, started by the first module that needs it (realm ``lake`` imported the way the
    docs show, at start-up; the tests use their own copies), stopped when the session ends."""
    with keycloak(tmp_path_factory.mktemp("keycloak")) as server:
        yield server


def realm_name(module: str) -> str:
    """A realm name of the module's own: ``lake-<module>-<random>`` (readable in Keycloak's log, never reused)."""
    short = re.sub(r"[^a-z0-9]+", "-", module.rsplit(".", 1)[-1].lower().removeprefix("test_keycloak_")).strip("-")
    return f"lake-{short}-{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def kc(kc_server: Keycloak, request: pytest.FixtureRequest) -> Iterator[Keycloak]:
    """The module's own realm on the session's Keycloak; everything the module did to it is deleted with it."""
    handle = kc_server.new_realm(realm_name(request.module.__name__))
    try:
        yield handle
    finally:
        handle.drop_realm()
