"""Keycloak 26.7.3 on loopback, as a real identity provider for the ``keycloak`` test group.

Installed once: Maven fetches ``org.keycloak:keycloak-quarkus-dist:<v>:zip`` from Maven Central into
``$LAKESESSION_CACHE_DIR/maven-repo``, the zip is unpacked into a staging directory, Quarkus' build step
(``kc.sh build`` with :data:`BUILD_OPTIONS`, ~30 s warm, minutes on a loaded machine) runs there once, and the
directory is renamed to ``$LAKESESSION_CACHE_DIR/keycloak/<v>/`` (a file lock keeps two processes from doing it
twice). ``python -m tests._keycloak install`` (``.ci/keycloak``) does only that.

Each start gets its own home: a hard-link copy (``cp -al``) of the built folder with a fresh ``data/`` (its
H2 database, transaction logs and the realm file to import), so concurrent instances never share state and
the build is never repeated: ``start --optimized`` trusts the persisted build and never rewrites ``lib/``.
It listens on free loopback ports (HTTP and management), imports ``docs/how-to/keycloak/lake-realm.json``
with every ``CHANGE-ME-*`` secret and password replaced by a random one, and creates its admin from
``KC_BOOTSTRAP_ADMIN_USERNAME/PASSWORD`` (random too). Nothing secret reaches the command line.

A start costs 45-80 s on CI's two cores: the test group shares one server per session (``tests/keycloak/conftest.py``)
and each module works in its own copy of the realm (:meth:`Keycloak.new_realm`, :meth:`Keycloak.drop_realm`).
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import java_major

VERSION = "26.7.3"
MIN_JAVA = 21
ROOT = Path(__file__).resolve().parent.parent
REALM_FILE = ROOT / "docs" / "how-to" / "keycloak" / "lake-realm.json"
REALM = "lake"
#: build-time options: ``kc.sh build`` persists them; ``start --optimized`` must not pass others
BUILD_OPTIONS = ("--db=dev-file", "--health-enabled=true")
#: a small heap and C1 only: tests start many short-lived servers on 2 cores
JVM_OPTIONS = {"JAVA_OPTS_KC_HEAP": "-Xms64m -Xmx512m", "JAVA_OPTS_APPEND": "-XX:TieredStopAtLevel=1"}


def cache_dir() -> Path:
    """``$LAKESESSION_CACHE_DIR`` or ``~/.cache/lakesession`` (the jar cache's root, without importing it)."""
    override = os.environ.get("LAKESESSION_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "lakesession"


def java_home() -> Path:
    """A Java 21+ home for Keycloak: ``$KEYCLOAK_JAVA_HOME``, ``$JAVA_HOME``, ``java`` on PATH, /usr/lib/jvm/*."""
    homes = [os.environ.get("KEYCLOAK_JAVA_HOME"), os.environ.get("JAVA_HOME")]
    if java := shutil.which("java"):
        homes.append(str(Path(java).resolve().parent.parent))
    homes += [str(p.parent.parent) for p in sorted(Path("/usr/lib/jvm").glob("*/bin/java"))]
    seen: list[str] = []
    for home in homes:
        if not home or home in seen or not (Path(home) / "bin" / "java").is_file():
            continue
        seen.append(home)
        if java_major(str(Path(home) / "bin" / "java")) >= MIN_JAVA:
            return Path(home)
    raise RuntimeError(
        f"Keycloak {VERSION} needs Java {MIN_JAVA}+; found only {seen or 'no java'}. "
        "Fix: install a JDK 21+ (e.g. Temurin) under /usr/lib/jvm, or set $KEYCLOAK_JAVA_HOME to its home."
    )


def _zip(timeout: float) -> Path:
    """The distribution zip in the shared Maven repository (Maven downloads and checks it once)."""
    repo = cache_dir() / "maven-repo"
    path = repo / "org/keycloak/keycloak-quarkus-dist" / VERSION / f"keycloak-quarkus-dist-{VERSION}.zip"
    if path.is_file():
        return path
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (`mvn`) is needed once to fetch Keycloak from Maven Central (apt-get install maven)")
    artifact = f"org.keycloak:keycloak-quarkus-dist:{VERSION}:zip"
    out = subprocess.run(
        [
            mvn,
            "-B",
            "-q",
            f"-Dmaven.repo.local={repo}",
            "dependency:get",
            f"-Dartifact={artifact}",
            "-Dtransitive=false",
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0 or not path.is_file():
        raise RuntimeError(f"mvn could not fetch {artifact}:\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    return path


def install(timeout: float = 900.0) -> Path:
    """The built Keycloak home (``<cache>/keycloak/<v>``): fetched, unpacked and built once, atomically."""
    home = cache_dir() / "keycloak" / VERSION
    if _built_with(home) == list(BUILD_OPTIONS):
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with (home.parent / f"{VERSION}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here, then finds the finished build
        if _built_with(home) == list(BUILD_OPTIONS):
            return home
        java = java_home()
        staging = home.with_name(f".{VERSION}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(_zip(timeout)) as archive:
            archive.extractall(staging)
        inner = staging / f"keycloak-{VERSION}"
        for script in (inner / "bin").glob("*.sh"):
            script.chmod(0o755)  # zipfile drops the mode bits
        env = {**_clean_env(), "JAVA_HOME": str(java), **JVM_OPTIONS}
        started = time.monotonic()
        out = subprocess.run(
            [str(inner / "bin" / "kc.sh"), "build", *BUILD_OPTIONS],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=inner,
        )
        if out.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(f"kc.sh build failed ({out.returncode}):\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
        (inner / ".built").write_text(json.dumps({"options": BUILD_OPTIONS, "seconds": time.monotonic() - started}))
        if home.exists():  # built with other options: running instances keep their hard links to it
            home.rename(staging / "old")
        inner.rename(home)
        shutil.rmtree(staging, ignore_errors=True)
    return home


def _built_with(home: Path) -> list[str] | None:
    """The build options ``home`` was built with (``None``: not built)."""
    try:
        return list(json.loads((home / ".built").read_text())["options"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _clean_env() -> dict[str, str]:
    """The environment without Keycloak/Quarkus settings or cloud keys a developer may have exported."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("KC_", "KEYCLOAK_", "QUARKUS_", "AWS_"))}


def _instance_home(built: Path, target: Path) -> Path:
    """A private home sharing the built files by hard link (a plain copy across file systems)."""
    done = subprocess.run(["cp", "-al", str(built), str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(built, target, symlinks=True)
    shutil.rmtree(target / "data", ignore_errors=True)
    (target / "data" / "import").mkdir(parents=True)
    return target


def realm_document(path: Path = REALM_FILE) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """The realm file with each ``CHANGE-ME-<name>`` replaced by a random secret: (realm, clients', users')."""
    realm = json.loads(path.read_text())
    client_secrets: dict[str, str] = {}
    passwords: dict[str, str] = {}
    for client in realm.get("clients", []):
        if str(client.get("secret", "")).startswith("CHANGE-ME"):
            client["secret"] = client_secrets[client["clientId"]] = secrets.token_urlsafe(18)
    for user in realm.get("users", []):
        for cred in user.get("credentials", []):
            if cred.get("type") == "password" and str(cred.get("value", "")).startswith("CHANGE-ME"):
                cred["value"] = passwords[user["username"]] = secrets.token_urlsafe(12)
    return realm, client_secrets, passwords


@dataclass
class Keycloak:
    """A running Keycloak and one realm on it (:data:`REALM`, or :meth:`new_realm`'s); admin and token helpers."""

    base: str  # http://127.0.0.1:<port>
    management: str  # http://127.0.0.1:<management port> (health)
    log: Path
    realm: str = REALM
    started_in: float = 0.0  # seconds from process start to /health/ready
    pid: int = 0
    admin_user: str = field(default="admin", repr=False)
    admin_password: str = field(default="", repr=False)
    client_secrets: dict[str, str] = field(default_factory=dict, repr=False)
    passwords: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def issuer(self) -> str:
        return f"{self.base}/realms/{self.realm}"

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    # -- admin REST ---------------------------------------------------------------------
    def admin_token(self) -> str:
        """A fresh master-realm admin token (password grant of ``admin-cli``)."""
        r = _http().post(
            f"{self.base}/realms/master/protocol/openid-connect/token",
            data={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": self.admin_user,
                "password": self.admin_password,
            },
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return str(r.json()["access_token"])

    def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        """``method`` on ``/admin/realms/<realm><path>`` with a fresh admin token; the httpx response."""
        headers = {"Authorization": f"Bearer {self.admin_token()}", **kwargs.pop("headers", {})}
        return _http().request(method, f"{self.base}/admin/realms/{self.realm}{path}", headers=headers, **kwargs)

    def new_realm(self, name: str, realm_file: Path = REALM_FILE) -> Keycloak:
        """Realm ``name`` created on this server from ``realm_file`` (fresh secrets): a handle to it.

        The admin API's realm import (``POST /admin/realms``) takes the same representation as ``--import-realm``,
        so a module gets the documented realm in a second or two instead of a server of its own.
        """
        realm, client_secrets, passwords = realm_document(realm_file)
        realm["realm"] = name
        headers = {"Authorization": f"Bearer {self.admin_token()}"}
        r = _http().post(f"{self.base}/admin/realms", json=realm, headers=headers, timeout=120)
        assert r.status_code == 201, f"creating realm {name!r}: {r.status_code} {r.text}"
        return dataclasses.replace(self, realm=name, client_secrets=client_secrets, passwords=passwords)

    def drop_realm(self) -> None:
        """Delete this handle's realm with everything in it (users, sessions, clients, keys)."""
        r = self.admin("DELETE", "", timeout=120)
        assert r.status_code == 204, f"deleting realm {self.realm!r}: {r.status_code} {r.text}"

    def _one_id(self, path: str, params: dict[str, str], key: str, value: str) -> str:
        r = self.admin("GET", path, params={**params, "exact": "true"}, timeout=30)
        assert r.status_code == 200, r.text
        found = [x["id"] for x in r.json() if x.get(key) == value]
        assert len(found) == 1, f"{path}: {value!r} matched {len(found)}"
        return str(found[0])

    def user_id(self, username: str) -> str:
        return self._one_id("/users", {"username": username}, "username", username)

    def group_id(self, name: str) -> str:
        return self._one_id("/groups", {"search": name}, "name", name)

    def add_to_group(self, username: str, group: str) -> None:
        r = self.admin("PUT", f"/users/{self.user_id(username)}/groups/{self.group_id(group)}", timeout=30)
        assert r.status_code == 204, r.text

    def remove_from_group(self, username: str, group: str) -> None:
        r = self.admin("DELETE", f"/users/{self.user_id(username)}/groups/{self.group_id(group)}", timeout=30)
        assert r.status_code == 204, r.text

    def groups_of(self, username: str) -> list[str]:
        r = self.admin("GET", f"/users/{self.user_id(username)}/groups", timeout=30)
        assert r.status_code == 200, r.text
        return sorted(g["name"] for g in r.json())

    # -- tokens (for tests that are not about the login flow itself) -----------------------
    def password_grant(self, username: str, client: str = "lakesession-cli", **data: str) -> dict[str, Any]:
        """The token response of a password grant for ``username`` (its imported password)."""
        form = {"grant_type": "password", "client_id": client, "username": username, "scope": "openid", **data}
        form.setdefault("password", self.passwords[username])
        auth = (client, self.client_secrets[client]) if client in self.client_secrets else None
        if auth is not None:
            form.pop("client_id")
        r = _http().post(self.token_endpoint, data=form, auth=auth, timeout=30)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def user_token(self, username: str, client: str = "lakesession-cli") -> str:
        return str(self.password_grant(username, client)["access_token"])

    def client_token(self, client: str) -> str:
        """A service principal's access token: client credentials of confidential client ``client``."""
        r = _http().post(
            self.token_endpoint,
            data={"grant_type": "client_credentials"},
            auth=(client, self.client_secrets[client]),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return str(r.json()["access_token"])


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's payload, unverified (for assertions on what Keycloak put in it)."""
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def _jvm_of(script: int) -> int:
    """The JVM ``kc.sh`` runs as its child (it forwards SIGTERM to it); ``script`` itself if none."""
    try:
        children = Path(f"/proc/{script}/task/{script}/children").read_text().split()
    except OSError:
        return script
    return int(children[0]) if children else script


def _http() -> Any:
    import httpx  # the install step (``.ci/keycloak``) needs only the standard library

    return httpx


@contextmanager
def keycloak(workdir: Path, *, realm_file: Path = REALM_FILE, timeout: float = 300.0) -> Iterator[Keycloak]:
    """Start Keycloak with its own home under ``workdir`` and ``realm_file`` imported; stop it on exit."""
    from tests.factories import free_port, stop_process

    built = install()
    java = java_home()
    workdir.mkdir(parents=True, exist_ok=True)
    home = _instance_home(built, workdir / "keycloak")
    realm, client_secrets, passwords = realm_document(realm_file)
    target = home / "data" / "import" / f"{realm['realm']}-realm.json"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(realm, f)
    port, management = free_port(), free_port()
    admin_password = secrets.token_urlsafe(18)
    env = {
        **_clean_env(),
        "JAVA_HOME": str(java),
        **JVM_OPTIONS,
        "KC_BOOTSTRAP_ADMIN_USERNAME": "admin",
        "KC_BOOTSTRAP_ADMIN_PASSWORD": admin_password,
    }
    cmd = [
        str(home / "bin" / "kc.sh"),
        "start",
        "--optimized",
        "--import-realm",
        "--cache=local",  # no cluster: the default (ispn) opens JGroups ports on every interface
        "--http-enabled=true",
        "--http-host=127.0.0.1",
        f"--http-port={port}",
        "--http-management-host=127.0.0.1",
        f"--http-management-port={management}",
        f"--hostname=http://127.0.0.1:{port}",
    ]
    log_path = workdir / "keycloak.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    handle = Keycloak(
        base=f"http://127.0.0.1:{port}",
        management=f"http://127.0.0.1:{management}",
        log=log_path,
        realm=str(realm["realm"]),
        admin_password=admin_password,
        client_secrets=client_secrets,
        passwords=passwords,
    )
    started = time.monotonic()
    try:
        httpx = _http()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Keycloak exited with {proc.returncode} while starting:\n{handle.log_tail()}")
            try:
                ready = httpx.get(f"{handle.management}/health/ready", timeout=2).status_code == 200
                if ready and httpx.get(f"{handle.issuer}/.well-known/openid-configuration", timeout=5).is_success:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > started + timeout:
                raise RuntimeError(f"Keycloak was not ready within {timeout} s:\n{handle.log_tail()}")
            time.sleep(0.5)
        handle.started_in = time.monotonic() - started
        handle.pid = _jvm_of(proc.pid)
        yield handle
    finally:
        stop_process(proc, 30)
        shutil.rmtree(home, ignore_errors=True)  # its own links and data only: the built cache is untouched


if __name__ == "__main__":  # python -m tests._keycloak install
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m tests._keycloak install")
    t0 = time.monotonic()
    where = install()
    print(f"Keycloak {VERSION}: {where} ({time.monotonic() - t0:.1f} s)")
