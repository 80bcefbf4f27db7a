"""A real JupyterHub on loopback for the hub tests (``tests/browser/test_hub*.py``, ``tests/keycloak/test_keycloak_hub.py``).

``run_hub`` starts ``python -m jupyterhub -f tests/hub/<config>`` (configurable-http-proxy from npm, local-process
spawner) against an ``Upstream`` — the issuer its users log in at and the catalog their kernels read — and
stops it with its servers; ``spawn_server`` starts a user's server; the ``KERNEL_*`` snippets run in a kernel
there (``tests.hub.kernel.Kernel``). Token values never leave the processes holding them: compare ``sha`` hashes.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lakesession._spark.jars import cache_dir, resolve_jars
from tests._node import npm_tool
from tests.factories import free_port
from tests.hub.kernel import Kernel

HERE = Path(__file__).parent  # tests/ (its hub/ configs)
CHP_VERSION = "5.3.0"


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass
class Upstream:
    """What the hub's users log in at (``issuer``) and read from (``catalog_uri``, ``warehouse``); ``handle`` is
    the test's object for the catalog (``Hub.catalog``); ``seed`` runs while the hub starts."""

    issuer: str
    catalog_uri: str
    warehouse: str
    handle: Any = None
    seed: Callable[[], None] | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)


def reference_upstream(cat: Any) -> Upstream:
    """A reference catalog (``make_catalog``) with its embedded issuer, seeded with ``hub``/``secret.t``."""
    return Upstream(
        cat.issuer_uri, cat.uri, cat.warehouse, cat, lambda: seed_reference(cat), (cat.admin_credentials.client_secret,)
    )


@dataclass
class Hub:
    url: str
    catalog: Any  # the test's handle of the catalog (a ReferenceCatalog, a Served ...)
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


@contextmanager
def run_hub(
    run_dir: Path,
    port: int,
    cat: Any,
    config: str,
    *,
    drop: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    extra_secrets: Iterable[str] = (),
) -> Iterator[Hub]:
    """A JupyterHub on ``port`` configured by ``tests/hub/<config>``, its users logging in at ``cat``'s
    issuer (``cat``: an ``Upstream``, or a reference catalog: ``reference_upstream``); seeded and healthy when yielded, stopped when the block ends. ``drop``: more variable prefixes
    the hub must not inherit; ``extra_secrets``: the users' secrets, watched for in every output."""
    up = cat if isinstance(cat, Upstream) else reference_upstream(cat)
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
            "LAKESESSION_TEST_HUB_ISSUER": up.issuer,
            "LAKESESSION_TEST_HUB_CATALOG": up.catalog_uri,
            "LAKESESSION_TEST_HUB_WAREHOUSE": up.warehouse,
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
    watched = {crypt_key, service_token, *up.secrets, *extra_secrets}
    handle = Hub(f"http://127.0.0.1:{port}", up.handle, log, proc, service_token, watched)
    try:
        if up.seed is not None:
            up.seed()  # while the hub starts
        wait_until(lambda: _healthy(handle), 90, f"the hub did not come up; log:\n{tail(log)}")
        yield handle
    finally:
        stop_hub(proc)


def seed_reference(cat: Any) -> None:
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
    assert hub.proc.poll() is None, f"the hub exited ({hub.proc.returncode}); log:\n{tail(hub.log)}"
    try:
        return httpx.get(f"{hub.url}/hub/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(check, timeout: float, message: str, interval: float = 0.3) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(interval)


def tail(path: Path, n: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else "(no log)"


def stop_hub(proc: subprocess.Popen[bytes]) -> None:
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


def spawn_server(hub: Hub, login: Login, user: str) -> None:
    spawn = login.browser.get("/hub/spawn")
    assert spawn.status_code in (200, 302), spawn.status_code
    wait_for_server(hub, user, login.api_token)


def wait_for_server(hub: Hub, user: str, api_token: str, timeout: float = 120) -> None:
    """Until ``user``'s default server is ready (asked with the user's own API token)."""
    headers = {"Authorization": f"token {api_token}"}

    def ready() -> bool:
        model = httpx.get(f"{hub.url}/hub/api/users/{user}", headers=headers, timeout=30).json()
        return bool(model.get("servers", {}).get("", {}).get("ready"))

    wait_until(ready, timeout, f"the server did not start; log:\n{tail(hub.log)}", interval=0.5)


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


KERNEL_REFRESH = """
import time
_t0 = s.identity.token(); _start = time.time(); _now = _t0
while _now == _t0 and time.time() - _start < {limit}:
    time.sleep(0.5)
    _now = s.identity.token()
seen.update((_t0, _now))
print(json.dumps({{"before": h(_t0), "after": h(_now), "waited": round(time.time() - _start, 1),
                  "refreshed_at": time.time(), "expires_at": s.identity.expires_at}}))
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
