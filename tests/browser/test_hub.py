"""JupyterHub acceptance: a real hub (configurable-http-proxy from npm, local-process spawner) whose
users log in at the reference catalog's embedded issuer (device grant); a notebook kernel in the
spawned server runs ``lakesession.spark()`` as that user and sees the tokens the hub refreshes.

Token values never leave the processes that hold them: kernels and the test compare SHA-256 hashes.
"""

from __future__ import annotations

import html
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from traitlets.config import Config

import lakesession.hub
from lakesession.identity import IdentityError, JupyterHubToken
from lakesession.reference import ReferenceCatalog
from tests._hub import (
    KERNEL_REFRESH,
    KERNEL_SCAN,
    KERNEL_START,
    Hub,
    Login,
    Notebook,
    run_hub,
    sha,
)
from tests._hub import spawn_server as _spawn
from tests.factories import free_port, make_catalog
from tests.hub.kernel import Kernel

TOKEN_TTL = 20  # seconds: the kernel re-reads the hub (which then refreshes) 2 s before each expiry
ALICE_SECRET = "alice-hub-secret-" + secrets.token_hex(8)
BOOTSTRAP = f"""
principals:
  - {{name: alice, type: user, client_id: alice, client_secret: {ALICE_SECRET}}}
roles:
  - {{name: hubusers, members: [alice]}}
grants:
  - {{role: hubusers, privilege: NAMESPACE_READ_PROPERTIES, on: namespace hub}}
  - {{role: hubusers, privilege: TABLE_LIST, on: namespace hub}}
  - {{role: hubusers, privilege: TABLE_CREATE, on: namespace hub}}
  - {{role: hubusers, privilege: TABLE_WRITE_DATA, on: namespace hub}}
"""


# -- fast checks of the configuration helpers -------------------------------------------------------
def test_configure_merges_environment_roles_and_hooks() -> None:
    c = Config()
    c.Spawner.environment = {"KEEP": "1"}
    c.JupyterHub.load_roles = [{"name": "server", "scopes": ["inherit"]}, {"name": "other", "scopes": ["x"]}]
    calls: list[str] = []
    c.Spawner.auth_state_hook = lambda spawner, state: calls.append("theirs")
    lakesession.hub.configure(c, catalog_uri="https://cat.example/", issuer="https://idp.example", warehouse="w")
    assert c.Spawner.environment == {
        "KEEP": "1",
        "LAKESESSION_URI": "https://cat.example",
        "LAKESESSION_IDENTITY": "jupyterhub",
        "LAKESESSION_ISSUER": "https://idp.example",
        "LAKESESSION_WAREHOUSE": "w",
    }
    roles = {r["name"]: r["scopes"] for r in c.JupyterHub.load_roles}
    assert roles["server"] == ["inherit", "admin:auth_state!user", "read:users!user"]
    assert roles["user"] == ["self", "admin:auth_state!user"]
    assert roles["other"] == ["x"]
    assert c.Authenticator.enable_auth_state is True and c.Authenticator.refresh_pre_spawn is True
    assert c.Authenticator.auth_refresh_age == 60
    assert c.Spawner.auth_state_hook.hooks[1] is lakesession.hub.auth_state_hook  # theirs first, then ours


def test_auth_state_hook_passes_the_access_token_but_never_the_refresh_token() -> None:
    from jupyterhub.spawner import SimpleLocalProcessSpawner

    spawner = SimpleLocalProcessSpawner()
    spawner.environment = {"LAKESESSION_URI": "https://cat.example", "LAKESESSION_HUB_TOKEN_EXPIRES_AT": "1.0"}
    lakesession.hub.auth_state_hook(spawner, {"access_token": "AT-1", "refresh_token": "RT-1", "expires_at": 5})
    assert spawner.environment == {
        "LAKESESSION_URI": "https://cat.example",
        "LAKESESSION_HUB_ACCESS_TOKEN": "AT-1",
        "LAKESESSION_HUB_TOKEN_EXPIRES_AT": "5.0",
    }
    assert "RT-1" not in repr(spawner.environment)
    lakesession.hub.auth_state_hook(spawner, None)  # logged out / no auth_state: stale tokens are removed
    assert spawner.environment == {"LAKESESSION_URI": "https://cat.example"}


def test_identity_from_env_takes_the_initial_token_out_of_the_environment(catalog: ReferenceCatalog) -> None:
    assert lakesession.hub.identity_from_env(environ={}) is None
    with pytest.raises(IdentityError, match="not one lakesession knows"):
        lakesession.hub.identity_from_env(environ={"LAKESESSION_IDENTITY": "kerberos"})
    token = catalog.admin.token_for("alice", ttl=600)
    env = {
        "LAKESESSION_IDENTITY": "jupyterhub",
        "LAKESESSION_ISSUER": catalog.issuer_uri,
        "LAKESESSION_HUB_ACCESS_TOKEN": token,
        "LAKESESSION_HUB_TOKEN_EXPIRES_AT": str(time.time() + 600),
        "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api",
        "JUPYTERHUB_USER": "alice",
        "JUPYTERHUB_API_TOKEN": "hub-api-token-value",
    }
    source = lakesession.hub.identity_from_env(environ=env)
    assert isinstance(source, JupyterHubToken)
    assert "LAKESESSION_HUB_ACCESS_TOKEN" not in env and "LAKESESSION_HUB_TOKEN_EXPIRES_AT" not in env
    assert source.token() == token  # served without asking the (unreachable) hub
    assert source.principal == "alice" and source.issuer == catalog.issuer_uri
    shown = repr(source) + str(source.describe())
    assert token not in shown and "hub-api-token-value" not in shown


def _connect_from_hub_environment(catalog: ReferenceCatalog) -> None:
    """What a kernel in a hub-spawned server does: ``lakesession.connect()`` with only the hook's variables."""
    token = catalog.admin.token_for("alice", ttl=600)
    with pytest.MonkeyPatch.context() as mp:
        for var in [k for k in os.environ if k.startswith(("LAKESESSION_", "JUPYTERHUB_"))]:
            mp.delenv(var)
        mp.setenv("LAKESESSION_CONFIG", os.devnull)
        for var, value in {
            "LAKESESSION_URI": catalog.uri,
            "LAKESESSION_IDENTITY": "jupyterhub",
            "LAKESESSION_HUB_ACCESS_TOKEN": token,
            "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api",
            "JUPYTERHUB_USER": "alice",
            "JUPYTERHUB_API_TOKEN": "hub-api-token-value",
        }.items():
            mp.setenv(var, value)
        session = lakesession.connect()
        try:
            assert session.identity.kind == "jupyterhub", (
                "lakesession.connect() did not pick the hub identity: session._identity() must call "
                "lakesession.hub.identity_from_env() (see lakesession/hub/__init__.py)"
            )
            assert session.identity.token() == token and session.identity.principal == "alice"
            assert "LAKESESSION_HUB_ACCESS_TOKEN" not in os.environ
        finally:
            session.close()


def test_connect_picks_the_hub_identity_from_the_environment(catalog: ReferenceCatalog) -> None:
    _connect_from_hub_environment(catalog)


# -- the real hub -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    run_dir = tmp_path_factory.mktemp("hub")
    with make_catalog(BOOTSTRAP, data_dir=run_dir / "catalog", access_token_ttl=TOKEN_TTL) as cat:
        with run_hub(run_dir, free_port(), cat, "jupyterhub_config.py", extra_secrets=[ALICE_SECRET]) as handle:
            yield handle


def _login(hub: Hub, user: str, secret: str) -> Login:
    """What a browser does: hub login page -> device code -> approve at the issuer -> back to the hub."""
    browser = httpx.Client(base_url=hub.url, timeout=30)
    page = browser.get("/hub/login")
    assert page.status_code == 200 and "device_login" in page.text
    start_page = browser.get("/hub/device_login")
    assert start_page.status_code == 200, start_page.text[:500]
    user_code = html.unescape(re.search(r'data-user-code="([^"]+)"', start_page.text).group(1))  # type: ignore[union-attr]
    link = html.unescape(re.search(r'id="verification" href="([^"]+)"', start_page.text).group(1))  # type: ignore[union-attr]
    assert link.startswith(hub.catalog.issuer_uri)
    waiting = browser.get("/hub/device_callback")  # not approved yet: the hub keeps waiting
    assert waiting.status_code == 200 and "Waiting for approval" in waiting.text
    with httpx.Client(timeout=30) as idp:  # the user signs in at the issuer and approves the code
        assert idp.get(link).status_code == 200
        approved = idp.post(
            link.split("?")[0], data={"user_code": user_code, "username": user, "password": secret, "action": "approve"}
        )
        assert approved.status_code == 200 and "Approved" in approved.text
    done = browser.get("/hub/device_callback")
    assert done.status_code == 302, done.text[:500]
    browser.get("/hub/home")  # sets the _xsrf cookie, as a page load in a browser does
    created = browser.post(
        f"/hub/api/users/{user}/tokens",
        json={"note": "test_hub", "expires_in": 3600},
        headers={"X-XSRFToken": browser.cookies.get("_xsrf", path="/hub/") or ""},
    )
    assert created.status_code == 201, created.text[:300]
    return Login(browser, created.json()["token"])


KERNEL_SPARK = """
spark.sql("CREATE TABLE lake.hub.orders USING iceberg AS "
          "SELECT * FROM VALUES (1L, 9.5D), (2L, 20.0D) AS t(id, amount)")
_row = spark.sql("SELECT count(*) AS n, sum(amount) AS total FROM lake.hub.orders").collect()[0]
try:
    spark.table("lake.secret.t").count()
    _denied = None
except Exception as e:
    _denied = type(e).__name__ + ": " + str(e)[:300]
seen.add(s.identity.token())
print(json.dumps({"n": _row["n"], "total": _row["total"], "denied": _denied}))
"""


KERNEL_AFTER_REFRESH = """
_cols = [r.col_name for r in spark.sql("DESCRIBE TABLE lake.hub.orders").collect()][:2]  # loads it upstream
print(json.dumps({"cols": _cols}))
"""


@pytest.fixture(scope="module")
def notebook(hub: Hub) -> Iterator[Notebook]:
    """alice logs in, her server spawns, and a kernel there runs ``lakesession.spark()`` and some SQL."""
    _connect_from_hub_environment(hub.catalog)  # fail fast (not after a kernel timeout) if not wired
    yield from alice_notebook(hub, _login(hub, "alice", ALICE_SECRET))


def alice_notebook(hub: Hub, login: Login) -> Iterator[Notebook]:
    """With alice logged in: her server spawns and a kernel there runs ``lakesession.spark()`` and some SQL
    (the login's tokens are collected, to look for them in the logs later); ``yield from`` it in a fixture."""
    hub.secrets.add(login.api_token)
    hub.auth_state("alice")
    _spawn(hub, login, "alice")
    kernel = Kernel(f"{hub.url}/user/alice", login.api_token)
    try:
        started = kernel.check(KERNEL_START, timeout=180).json_lines()[-1]
        hub.auth_state("alice")
        since = time.time()
        done = kernel.check(KERNEL_SPARK, timeout=180).json_lines()[-1]
        yield Notebook(kernel, login, started, done, since)
    finally:
        kernel.close()
        login.browser.close()


@pytest.mark.slow
def test_notebook_spark_acts_as_the_hub_user(hub: Hub, notebook: Notebook) -> None:
    started = notebook.started
    assert started["env"] == {
        "LAKESESSION_URI": hub.catalog.uri,
        "LAKESESSION_IDENTITY": "jupyterhub",
        "LAKESESSION_ISSUER": hub.catalog.issuer_uri,
        "LAKESESSION_WAREHOUSE": hub.catalog.warehouse,
    }
    assert started["initial"] in {sha(t) for t in hub.secrets}  # the hook passed a token the hub held
    assert started["kind"] == "jupyterhub" and started["principal"] == "alice"
    assert started["initial_left_in_env"] is False and started["token_in_jvm_env"] is False

    done = notebook.spark
    assert done["n"] == 2 and done["total"] == 29.5
    assert done["denied"] and "secret.t" in done["denied"], done
    audit = hub.catalog.admin.audit(principal="alice", since=notebook.since - 1)
    decisions = {(r.securable, r.decision) for r in audit}
    assert ("table hub.orders", "allow") in decisions, decisions
    assert ("table secret.t", "deny") in decisions, decisions


@pytest.mark.slow
def test_kernel_sees_the_tokens_the_hub_refreshes(hub: Hub, notebook: Notebook) -> None:
    kernel = notebook.kernel
    before = hub.auth_state("alice")
    out = kernel.check(KERNEL_REFRESH.format(limit=TOKEN_TTL + 15), timeout=TOKEN_TTL + 120).json_lines()[-1]
    after = hub.auth_state("alice")
    assert out["before"] != out["after"], "the kernel's token did not change within one token lifetime"
    assert out["after"] == sha(after["access_token"])  # ... to the token the hub refreshed
    assert after["access_token"] != before["access_token"] and after["expires_at"] > before["expires_at"]
    # Spark keeps working without a restart: the gateway loads the table upstream with the new token
    assert kernel.check(KERNEL_AFTER_REFRESH).json_lines()[-1]["cols"] == ["id", "amount"]
    audit = hub.catalog.admin.audit(principal="alice", since=out["refreshed_at"] - 0.5)
    assert any(r.securable == "table hub.orders" and r.decision == "allow" for r in audit)


@pytest.mark.slow
def test_no_token_in_hub_server_or_kernel_logs(hub: Hub, notebook: Notebook) -> None:
    kernel = notebook.kernel
    hub.auth_state("alice")
    cookie_secret = (Path(hub.log).parent / "jupyterhub_cookie_secret").read_text().strip()
    text = hub.log.read_text(errors="replace")
    assert "Spawning" in text and "User logged in: alice" in text  # the log really is the hub's (and servers')
    leaked = [f"secret #{i}" for i, value in enumerate(sorted(hub.secrets | {cookie_secret})) if value in text]
    assert not leaked, f"{len(leaked)} of {len(hub.secrets) + 1} secrets appear in the hub's log"
    # the kernel checks its own secrets (its tokens, the server's API token) against the same log
    scan = kernel.check(KERNEL_SCAN.format(log=str(hub.log))).json_lines()[-1]
    assert scan["secrets"] >= 1 and scan["leaked"] == 0, scan


@pytest.mark.slow
def test_denied_or_unknown_device_login_is_refused(hub: Hub) -> None:
    with httpx.Client(base_url=hub.url, timeout=30) as browser, httpx.Client(timeout=30) as idp:
        assert browser.get("/hub/device_callback").status_code == 403  # no login started in this browser
        page = browser.get("/hub/device_login").text
        user_code = html.unescape(re.search(r'data-user-code="([^"]+)"', page).group(1))  # type: ignore[union-attr]
        link = html.unescape(re.search(r'id="verification" href="([^"]+)"', page).group(1))  # type: ignore[union-attr]
        denied = idp.post(
            link.split("?")[0],
            data={"user_code": user_code, "username": "alice", "password": ALICE_SECRET, "action": "deny"},
        )
        assert denied.status_code == 200 and "denied" in denied.text
        refused = browser.get("/hub/device_callback")
        assert refused.status_code == 403 and "access_denied" in refused.text
        assert "jupyterhub-hub-login" not in browser.cookies
