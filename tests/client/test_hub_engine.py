"""The JupyterHub hooks' ``engine`` option: the platform's trusted engine reaches users' servers as
``LAKESESSION_ENGINE``, and ``lakesession.connect()`` there picks it up (fast: no hub, no browser, no JVM).

The hub's other hooks are tested with the real hub in ``tests/browser/test_hub.py``.
"""

from __future__ import annotations

import os

import pytest
from traitlets.config import Config

import lakesession
import lakesession.hub
from lakesession.errors import ConfigError
from lakesession.reference import ReferenceCatalog

ENGINE = "sc://engine.internal:15002/;use_ssl=true"


def test_configure_passes_the_engine_address_to_every_server() -> None:
    c = Config()
    c.Spawner.environment = {"KEEP": "1"}
    lakesession.hub.configure(c, catalog_uri="https://cat.example/", engine=ENGINE)
    assert c.Spawner.environment == {
        "KEEP": "1",
        "LAKESESSION_URI": "https://cat.example",
        "LAKESESSION_IDENTITY": "jupyterhub",
        "LAKESESSION_ENGINE": ENGINE,
    }
    assert lakesession.hub.ENGINE_VAR == "LAKESESSION_ENGINE"


def test_without_an_engine_no_variable_is_set() -> None:
    c = Config()
    lakesession.hub.configure(c, catalog_uri="https://cat.example")
    assert "LAKESESSION_ENGINE" not in c.Spawner.environment
    assert "LAKESESSION_ENGINE" not in lakesession.hub.spawn_environment("https://cat.example", engine="")


@pytest.mark.parametrize(
    ("engine", "says"),
    [
        ("sc://engine.internal:15002", "use_ssl=true"),  # the users' tokens would travel in plaintext
        ("https://engine.internal:15002", "Spark Connect URL"),
        ("sc://engine.internal:15002/;use_ssl=true;token=shared", "token="),  # the engine names users from their own
        ("sc://engine.internal:15002/;use_ssl=true;user_id=alice", "user_id="),
    ],
)
def test_a_bad_engine_address_fails_when_the_hub_starts(engine: str, says: str) -> None:
    c = Config()
    with pytest.raises(ConfigError, match=says) as err:
        lakesession.hub.configure(c, catalog_uri="https://cat.example", engine=engine)
    assert "shared" not in str(err.value)
    assert not c.Spawner.get("environment"), "nothing may be configured from a refused address"


def test_plaintext_is_accepted_on_loopback_only() -> None:
    env = lakesession.hub.spawn_environment("https://cat.example", engine="sc://127.0.0.1:15002")
    assert env["LAKESESSION_ENGINE"] == "sc://127.0.0.1:15002"


def test_a_server_started_with_the_hooks_variables_uses_the_engine(catalog: ReferenceCatalog) -> None:
    """What a kernel in a hub-spawned server sees: ``connect()`` with only the hook's variables has the engine."""
    env = lakesession.hub.spawn_environment(catalog.uri, engine=ENGINE)
    token = catalog.admin.token_for("alice", ttl=600)
    with pytest.MonkeyPatch.context() as mp:
        for var in [k for k in os.environ if k.startswith(("LAKESESSION_", "JUPYTERHUB_"))]:
            mp.delenv(var)
        mp.setenv("LAKESESSION_CONFIG", os.devnull)
        for var, value in {
            **env,
            "LAKESESSION_HUB_ACCESS_TOKEN": token,
            "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api",
            "JUPYTERHUB_USER": "alice",
            "JUPYTERHUB_API_TOKEN": "hub-api-token-value",
        }.items():
            mp.setenv(var, value)
        assert lakesession.Settings.resolve(None, {}).engine == ENGINE
        session = lakesession.connect()
        try:
            assert session.identity.kind == "jupyterhub"
            assert session._engine_url == ENGINE
        finally:
            session.close()
