"""JupyterHub acceptance: a real hub (configurable-http-proxy from npm, local-process spawner) whose
users log in at the reference catalog's embedded issuer (device grant); a notebook kernel in the
spawned server runs ``lakesession.spark()`` as that user and sees the tokens the hub refreshes.

Token values never leave the processes that hold them: kernels and the test compare SHA-256 hashes.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from traitlets.config import Config

import lakesession.hub
from lakesession._spark.jars import cache_dir, resolve_jars
from lakesession.identity import IdentityError, JupyterHubToken
from lakesession.reference import ReferenceCatalog
from tests._node import npm_tool
from tests.factories import free_port, make_catalog
from tests.hub.kernel import Kernel

HERE = Path(__file__).parents[1]  # tests/ (its hub/ configs)
CHP_VERSION = "5.3.0"
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


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


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


@dataclass
class Hub:
    url: str
    catalog: ReferenceCatalog
    log: Path
    proc: subprocess.Popen[bytes]
    service_token: str
    secrets: set[str] = field(default_factory=set)  # every secret that must stay out of the logs

    def auth_state(self, user: str) -> dict:
        r = httpx.get(
            f"{self.url}/hub/api/users/{user}", headers={"Authorization": f"token {self.service_token}"}, timeout=30
        )
        assert r.status_code == 200, r.status_code
        state = r.json()["auth_state"]
        assert isinstance(state, dict) and state.get("access_token")
        self.secrets.update(v for k, v in state.items() if k in ("access_token", "refresh_token") and v)
        return state


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    run_dir = tmp_path_factory.mktemp("hub")
    with make_catalog(BOOTSTRAP, data_dir=run_dir / "catalog", access_token_ttl=TOKEN_TTL) as cat:
        with run_hub(run_dir, free_port(), cat, "jupyterhub_config.py", extra_secrets=[ALICE_SECRET]) as handle:
            yield handle


@contextmanager
def run_hub(
    run_dir: Path,
    port: int,
    cat: ReferenceCatalog,
    config: str,
    *,
    drop: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    extra_secrets: Iterable[str] = (),
) -> Iterator[Hub]:
    """A JupyterHub on ``port`` configured by ``tests/hub/<config>``, its users logging in at ``cat``'s
    issuer; seeded and healthy when yielded, stopped when the block ends. ``drop``: more variable prefixes
    the hub must not inherit; ``extra_secrets``: the users' secrets, watched for in every output."""
    chp = npm_tool("configurable-http-proxy", CHP_VERSION)
    crypt_key, service_token = secrets.token_hex(32), secrets.token_hex(24)
    resolve_jars()  # a fresh machine assembles the jar cache here, not inside the kernel
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "JUPYTERHUB_", "LAKESESSION_", *drop)) or k == "LAKESESSION_JARS"
    }
    env.update(
        {
            "JUPYTERHUB_CRYPT_KEY": crypt_key,
            "LAKESESSION_TEST_HUB_DIR": str(run_dir),
            "LAKESESSION_TEST_HUB_PORT": str(port),
            "LAKESESSION_TEST_HUB_API_PORT": str(free_port()),
            "LAKESESSION_TEST_HUB_PROXY_API_PORT": str(free_port()),
            "LAKESESSION_TEST_HUB_CHP": str(chp),
            "LAKESESSION_TEST_HUB_ISSUER": cat.issuer_uri,
            "LAKESESSION_TEST_HUB_CATALOG": cat.uri,
            "LAKESESSION_TEST_HUB_WAREHOUSE": cat.warehouse,
            "LAKESESSION_TEST_HUB_CACHE_DIR": str(cache_dir()),
            "LAKESESSION_TEST_HUB_SERVICE_TOKEN": service_token,
            **(extra_env or {}),
        }
    )
    log = run_dir / "hub.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(HERE / "hub" / config)],
            cwd=run_dir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    watched = {crypt_key, service_token, cat.admin_credentials.client_secret, *extra_secrets}
    handle = Hub(f"http://127.0.0.1:{port}", cat, log, proc, service_token, watched)
    try:
        _seed(cat)  # while the hub starts
        _wait_until(lambda: _healthy(handle), 90, f"the hub did not come up; log:\n{_tail(log)}")
        yield handle
    finally:
        _stop(proc)


def _seed(cat: ReferenceCatalog) -> None:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    admin = RestCatalog(
        "seed",
        uri=cat.uri,
        warehouse=cat.warehouse,
        credential=f"admin:{cat.admin_credentials.client_secret}",
        **{"oauth2-server-uri": f"{cat.issuer_uri}/token", "scope": "catalog"},
    )
    admin.create_namespace("hub")
    admin.create_namespace("secret")
    admin.create_table("secret.t", Schema(NestedField(1, "id", LongType(), required=False)))


def _healthy(hub: Hub) -> bool:
    assert hub.proc.poll() is None, f"the hub exited ({hub.proc.returncode}); log:\n{_tail(hub.log)}"
    try:
        return httpx.get(f"{hub.url}/hub/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _wait_until(check, timeout: float, message: str, interval: float = 0.3) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(interval)


def _tail(path: Path, n: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else "(no log)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the hub stops the servers it spawned and the proxy
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the process group this test started
            proc.wait(10)


@dataclass
class Login:
    browser: httpx.Client
    api_token: str


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


def _spawn(hub: Hub, login: Login, user: str) -> None:
    spawn = login.browser.get("/hub/spawn")
    assert spawn.status_code in (200, 302), spawn.status_code
    headers = {"Authorization": f"token {login.api_token}"}

    def ready() -> bool:
        model = httpx.get(f"{hub.url}/hub/api/users/{user}", headers=headers, timeout=30).json()
        return bool(model.get("servers", {}).get("", {}).get("ready"))

    _wait_until(ready, 120, f"the server did not start; log:\n{_tail(hub.log)}", interval=0.5)


KERNEL_START = """
import hashlib, json, os
h = lambda s: hashlib.sha256(s.encode()).hexdigest()
_env = {k: os.environ.get(k) for k in ("LAKESESSION_URI", "LAKESESSION_IDENTITY", "LAKESESSION_ISSUER",
                                       "LAKESESSION_WAREHOUSE")}
_initial = os.environ.get("LAKESESSION_HUB_ACCESS_TOKEN") or ""
import lakesession
spark = lakesession.spark()
s = lakesession.current_session()
seen = {t for t in (_initial, s.identity.token()) if t}
_jvm_env = open(f"/proc/{spark.sparkContext._gateway.proc.pid}/environ", "rb").read()
print(json.dumps({"env": _env, "initial": h(_initial) if _initial else None, "kind": s.identity.kind,
                  "principal": s.identity.principal, "hash": h(s.identity.token()),
                  "initial_left_in_env": "LAKESESSION_HUB_ACCESS_TOKEN" in os.environ,
                  "token_in_jvm_env": any(t.encode() in _jvm_env for t in seen)}))
"""

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

KERNEL_REFRESH = """
import time
_t0 = s.identity.token(); _start = time.time(); _now = _t0
while _now == _t0 and time.time() - _start < {limit}:
    time.sleep(0.5)
    _now = s.identity.token()
seen.update((_t0, _now))
print(json.dumps({{"before": h(_t0), "after": h(_now), "waited": round(time.time() - _start, 1),
                  "refreshed_at": time.time()}}))
"""

KERNEL_AFTER_REFRESH = """
_cols = [r.col_name for r in spark.sql("DESCRIBE TABLE lake.hub.orders").collect()][:2]  # loads it upstream
print(json.dumps({"cols": _cols}))
"""

KERNEL_SCAN = """
_secrets = set(seen) | {{os.environ["JUPYTERHUB_API_TOKEN"]}}
_log = open({log!r}, "rb").read()
print(json.dumps({{"secrets": len(_secrets), "leaked": sum(t.encode() in _log for t in _secrets)}}))
"""


@dataclass
class Notebook:
    kernel: Kernel
    login: Login
    started: dict  # what KERNEL_START printed
    spark: dict  # what KERNEL_SPARK printed
    since: float


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
