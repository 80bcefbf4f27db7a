"""pyiceberg's own integration tests (from the sdist of the installed pyiceberg) against ``lakesession serve``.

pyiceberg's suite expects a REST catalog on ``localhost:8181`` (its docker setup) and, for the tests that
read Spark-written tables, a Spark Connect server on ``localhost:15002`` with those tables provisioned by
its ``dev/provision.py``. Here both addresses are rewritten to a ``serve`` on a free port (and a Connect
server started by ``python -m tests._pyiceberg_suite --spark``), and the catalog's credentials reach
pyiceberg's ``load_catalog("local", ...)`` through ``PYICEBERG_CATALOG__LOCAL__*``.

The sdist and the few test-only packages it imports are fetched from PyPI once into
``~/.cache/lakesession/pyiceberg-tests/<version>`` (written to a temporary directory, then renamed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("LAKESESSION_CACHE_DIR", Path.home() / ".cache" / "lakesession")) / "pyiceberg-tests"
TEST_ONLY = ["pytest-lazy-fixtures", "fastavro", "pytz", "pytest-mock", "thrift"]  # what its test modules import
PYTEST_INI = """[pytest]
testpaths = tests
markers =
    unmarked: unit
    s3: s3
    adls: adls
    integration: integration
    gcs: gcs
    benchmark: benchmark
    notebook: notebook
"""
# pyiceberg's tests of format v3 that need no Spark (the rest of the file runs too: v1/v2 unchanged)
NO_SPARK = [
    "tests/integration/test_rest_schema.py",
    "tests/integration/test_writes/test_writes.py::test_nanosecond_support_on_catalog",
]
# ... and those that read tables Spark wrote through the catalog (deletion vectors at v3)
WITH_SPARK = [
    "tests/integration/test_reads.py",
    "tests/integration/test_inspect_table.py",
    "-k",
    "(deletes or scan_tag or scan_branch or files_partitioned or format_version_3) and not hive",
]


def prepare() -> Path:
    """The cached copy of pyiceberg's ``tests/`` and ``dev/`` plus its test-only packages (``site/``)."""
    version = importlib.metadata.version("pyiceberg")
    root = CACHE / version
    if (root / "ready").is_file():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=CACHE))
    try:
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        sdist = f"pyiceberg=={version}"
        subprocess.run(
            [*pip, "download", "--no-deps", "--no-binary", ":all:", sdist, "-d", str(tmp / "dl")], check=True
        )
        (archive,) = (tmp / "dl").glob("pyiceberg-*.tar.gz")
        with tarfile.open(archive) as tar:
            top = f"pyiceberg-{version}/"
            members = [m for m in tar.getmembers() if m.name.startswith((top + "tests/", top + "dev/"))]
            for m in members:
                m.name = m.name[len(top) :]
            tar.extractall(tmp, members=members, filter="data")
        subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp / "site"), *TEST_ONLY], check=True)
        (tmp / "pytest.ini").write_text(PYTEST_INI)
        (tmp / "ready").write_text(version)
        try:
            tmp.rename(root)
        except OSError:  # another process got there first
            shutil.rmtree(tmp, ignore_errors=True)
        return root
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def workdir(root: Path, into: Path, catalog_uri: str, connect: str = "sc://localhost:15002") -> Path:
    """A copy of the suite whose fixed addresses point at this run's catalog (and Connect server)."""
    shutil.copytree(root / "tests", into / "tests")
    shutil.copy(root / "pytest.ini", into / "pytest.ini")
    shutil.copy(root / "dev" / "provision.py", into / "provision.py")
    for path in [*into.rglob("*.py")]:
        text = path.read_text()
        new = text.replace("http://localhost:8181", catalog_uri).replace("sc://localhost:15002", connect)
        if new != text:
            path.write_text(new)
    return into


def catalog_env(catalog_uri: str, secret: str, name: str = "local") -> dict[str, str]:
    """pyiceberg's ``load_catalog(name, uri=...)`` as the admin of ``serve`` (environment, not argv)."""
    key = f"PYICEBERG_CATALOG__{name.upper()}__"
    return {
        key + "CREDENTIAL": f"admin:{secret}",
        key + "OAUTH2_SERVER_URI": f"{catalog_uri}/oidc/token",
        key + "WAREHOUSE": "lakesession",
        key + "SCOPE": "catalog",
    }


# the pytest plugins pyiceberg's tests use (from ``site/``); this venv's own (schemathesis, nbval, postgresql, …)
# are not autoloaded: importing them cost the suite ~8 CPU-s and most of a minute on a loaded 2-core machine
PLUGINS = ["-p", "pytest_lazy_fixtures.plugin", "-p", "pytest_mock"]


def run_pytest(work: Path, root: Path, env: dict[str, str], args: list[str]) -> subprocess.CompletedProcess[str]:
    # pyiceberg's own defaults (this project's conftest turns nanosecond downcasting on for its own tests)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    full_env = {**inherited, **env, "PYTHONPATH": str(root / "site"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PLUGINS, "-W", "ignore", "-rfE", *args]
    return subprocess.run(cmd, cwd=work, env=full_env, capture_output=True, text=True, timeout=1800)


def create_default_namespace(catalog_uri: str, env: dict[str, str], name: str = "local") -> None:
    """The ``default`` namespace pyiceberg's tests write to, over plain HTTP as ``catalog_env``'s principal (a
    child interpreter importing pyiceberg for one request cost several seconds on a loaded machine)."""
    import httpx

    key = f"PYICEBERG_CATALOG__{name.upper()}__"
    client_id, secret = env[key + "CREDENTIAL"].split(":", 1)
    form = {"grant_type": "client_credentials", "scope": env[key + "SCOPE"]}
    r = httpx.post(env[key + "OAUTH2_SERVER_URI"], data=form, auth=(client_id, secret), timeout=60)
    r.raise_for_status()
    headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
    with httpx.Client(base_url=catalog_uri, headers=headers, timeout=60) as http:
        config = http.get("/v1/config", params={"warehouse": env[key + "WAREHOUSE"]})
        config.raise_for_status()
        prefix = config.json().get("overrides", {}).get("prefix", "")
        r = http.post(f"/v1/{prefix}/namespaces" if prefix else "/v1/namespaces", json={"namespace": ["default"]})
        assert r.status_code in (200, 409), r.text  # 409: it exists already


def main(argv: list[str] | None = None) -> int:
    """Run the suite's v3 tests against a fresh ``serve``; ``--spark`` also provisions through Spark Connect."""
    from tests._serve import Served

    parser = argparse.ArgumentParser(prog="python -m tests._pyiceberg_suite", description=__doc__)
    parser.add_argument("--spark", action="store_true", help="also the tests over Spark-written tables")
    parser.add_argument("--connect-port", type=int, default=15002)
    parser.add_argument("--s3-emulator", action="store_true", help="s3:// warehouse (as pyiceberg's docker setup)")
    args = parser.parse_args(argv)
    root = prepare()
    with tempfile.TemporaryDirectory() as base:
        store = ["--s3-emulator", "--warehouse", "s3://pyiceberg/wh"] if args.s3_emulator else []
        with Served(["--port", "0", "--data-dir", f"{base}/data", *store]) as served:
            uri = served.uri
            secret = Path(served.lines["admin credentials"].split(" ")[0]).read_text().strip()
            env = catalog_env(uri, secret)
            work = workdir(root, Path(base) / "work", uri, f"sc://localhost:{args.connect_port}")
            create_default_namespace(uri, env)
            selections = [NO_SPARK]
            connect = None
            if args.spark:
                connect = start_connect(uri, secret, args.connect_port)
                provision = subprocess.run(
                    [sys.executable, str(work / "provision.py")],
                    env={**os.environ, **catalog_env(uri, secret, "rest"), "PYTHONPATH": str(root / "site")},
                    capture_output=True,
                    text=True,
                    timeout=1800,
                )
                failure = [line for line in provision.stderr.splitlines() if "Exception:" in line][:3]
                print("provision.py (rest catalog only):", "ok" if provision.returncode == 0 else failure)
                selections.append(WITH_SPARK)
            try:
                worst = 0
                for selection in selections:
                    result = run_pytest(work, root, env, selection)
                    print(result.stdout[-4000:])
                    worst = max(worst, result.returncode)
                return worst
            finally:
                if connect is not None:
                    connect.terminate()
                    connect.wait(timeout=60)


def start_connect(uri: str, secret: str, port: int) -> subprocess.Popen[bytes]:
    """A Spark Connect server whose default catalog ``rest`` is this ``serve`` (what provision.py writes to)."""
    import socket
    import time

    from lakesession._spark.connect_server import server_command, server_env

    c = "spark.sql.catalog.rest"
    conf = {
        c: "org.apache.iceberg.spark.SparkCatalog",
        f"{c}.type": "rest",
        f"{c}.uri": uri,
        f"{c}.warehouse": "lakesession",
        f"{c}.credential": f"admin:{secret}",
        f"{c}.oauth2-server-uri": f"{uri}/oidc/token",
        f"{c}.scope": "catalog",
        f"{c}.cache-enabled": "false",
        f"{c}.header.X-Iceberg-Access-Delegation": "vended-credentials",
        "spark.sql.defaultCatalog": "rest",
        "spark.sql.ansi.enabled": "false",  # provision.py was written for Spark 3.5's default
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
    }
    proc = subprocess.Popen(server_command(port, master="local[2]", conf=conf), env=server_env())
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        if proc.poll() is not None:
            break
        time.sleep(1)
    proc.terminate()
    raise RuntimeError(f"the Spark Connect server did not listen on {port}")


if __name__ == "__main__":
    sys.exit(main())
