"""The real artifacts: every distribution built as a wheel and an sdist (``python -m build``), each wheel
installed into a clean venv and run there, as a user would.

- the full ``lakesession``: ``lakesession demo`` (the embedded default: catalog, demo user, Spark);
- ``lakesession-client`` (with ``lakesession-core``, the files it shares): none of the server's stack, and it
  says in one line how to get the server and the engine;
- ``lakesession-catalog`` (with the core): no Spark, no client module, and ``lakesession-catalog`` serves;
- ``lakesession-engine`` (with the client and the core): ``lakesession engine --help``, no catalog server;
- client and catalog in one venv, then one uninstalled: the other still works (the core owns their shared
  files, so neither's RECORD removes the other's); the remaining catalog serves the remaining client.

Slow: one build of all wheels per module (~25 s) and six venvs (uv: seconds each from its cache under
``~/.cache/lakesession/uv``; the first run downloads the dependencies).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import httpx
import pytest

from lakesession.errors import FULL_INSTALL
from lakesession.lab import _build as labextension
from tests._serve import Served
from tests.factories import Policy
from tests.project.test_distributions import SERVER_STACK

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: (folder, distribution) of everything the repository builds
DISTRIBUTIONS = {
    ".": "lakesession",
    "core": "lakesession-core",
    "client": "lakesession-client",
    "catalog": "lakesession-catalog",
    "engine": "lakesession-engine",
}
SLIM = ("lakesession-core", "lakesession-client", "lakesession-catalog", "lakesession-engine")


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the checkout on the path, lakesession's settings or a venv."""
    drop = ("LAKESESSION_", "PYTHONPATH", "VIRTUAL_ENV", "UV_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    uv_cache = str(labextension.cache_dir() / "uv")
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "UV_CACHE_DIR": uv_cache, **extra}


def _run(cmd: list[str], timeout: float = 600, **kw: object) -> subprocess.CompletedProcess[str]:
    env = kw.pop("env", None) or _clean_env()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd[:4]}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every distribution's wheel (by distribution name), built with its sdist (the wheel from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    labextension.build()  # a no-op when fresh (the editable install built it); the sdist then carries it
    builds = [
        subprocess.Popen(
            [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out), str(ROOT / folder)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_clean_env(),
        )
        for folder in DISTRIBUTIONS
    ]
    for folder, proc in zip(DISTRIBUTIONS, builds, strict=True):
        log, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"python -m build {folder}:\n{log[-3000:]}"
    wheels = {}
    for name in DISTRIBUTIONS.values():
        stem = name.replace("-", "_") + "-0.1.0"
        assert (out / f"{stem}.tar.gz").is_file(), sorted(p.name for p in out.iterdir())
        wheels[name] = out / f"{stem}-py3-none-any.whl"
    return wheels


def _venv(where: Path, *wheels: Path) -> Path:
    """A clean venv (uv) holding ``wheels`` and their dependencies; returns its bin/ folder."""
    _run([sys.executable, "-m", "uv", "venv", "--quiet", "--python", sys.executable, str(where)])
    python = where / "bin" / "python"
    cmd = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(python), *map(str, wheels)]
    # offline first: pyspark is an sdist, and uv otherwise downloads and rebuilds it on every install (~36 s)
    if subprocess.run([*cmd, "--offline"], capture_output=True, env=_clean_env(), timeout=600).returncode != 0:
        _run(cmd)  # a cold cache: download once
    return where / "bin"


def _installed(bin_: Path) -> set[str]:
    out = _run([sys.executable, "-m", "uv", "pip", "list", "--python", str(bin_ / "python"), "--format", "json"])
    return {p["name"].lower().replace("_", "-") for p in json.loads(out.stdout)}


def _uninstall(bin_: Path, name: str) -> None:
    _run([sys.executable, "-m", "uv", "pip", "uninstall", "--quiet", "--python", str(bin_ / "python"), name])


def _owned(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if n.startswith("lakesession/")}


def test_the_slim_distributions_own_disjoint_files(dist: dict[str, Path]) -> None:
    owned = {n: _owned(dist[n]) for n in SLIM}
    for i, a in enumerate(SLIM):
        for b in SLIM[i + 1 :]:
            assert owned[a] & owned[b] == set(), (a, b)
    core, client, catalog, engine = owned.values()
    assert "lakesession/__init__.py" in core and "lakesession/reference/servecmd.py" in catalog
    assert "lakesession/_spark/jvm/lakesession-jvm.jar" in client and "lakesession/session.py" in client
    assert "lakesession/engine/_proxy.py" in engine and "lakesession/engine/jvm/lakesession-engine.jar" in engine
    # together they are the full package
    assert core | client | catalog | engine == _owned(dist["lakesession"])
    # the core is what the catalog and the client both import: not the client's 16.5k lines (#43)
    with zipfile.ZipFile(dist["lakesession-core"]) as z:
        lines = sum(z.read(n).count(b"\n") for n in core if n.endswith(".py"))
    assert 0 < lines <= 2000, lines
    with zipfile.ZipFile(dist["lakesession"]) as z:  # the JupyterLab front-end, built by the hook
        assert "lakesession-0.1.0.data/data/share/jupyter/labextensions/lakesession/package.json" in z.namelist()


def test_the_full_wheel_runs_the_demo(dist: dict[str, Path], tmp_path: Path) -> None:
    bin_ = _venv(tmp_path / "venv", dist["lakesession"])
    env = {k: v for k, v in _clean_env(LAKESESSION_HOME=str(tmp_path / "home")).items() if not k.startswith("AWS_")}
    out = _run([str(bin_ / "lakesession"), "demo"], env=env, cwd=tmp_path)
    assert "principal demo" in out.stdout and "read with pyiceberg: 4 orders" in out.stdout
    assert "Traceback" not in out.stderr


def test_the_client_wheel_holds_none_of_the_server_and_says_how_to_get_it(
    dist: dict[str, Path], tmp_path: Path
) -> None:
    bin_ = _venv(tmp_path / "venv", dist["lakesession-core"], dist["lakesession-client"])
    installed = _installed(bin_)
    assert {"lakesession-client", "lakesession-core", "pyspark", "hypercorn"} <= installed
    assert installed & SERVER_STACK == set()
    env = _clean_env(HOME=str(tmp_path))
    served = subprocess.run(
        [str(bin_ / "lakesession"), "serve"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert served.returncode == 2 and "needs lakesession's catalog server" in served.stderr
    assert FULL_INSTALL in served.stderr and "Traceback" not in served.stderr
    engine = subprocess.run(
        [str(bin_ / "lakesession"), "engine", "--help"], capture_output=True, text=True, timeout=120, env=env
    )
    assert engine.returncode == 2 and "needs lakesession-engine" in engine.stderr, engine.stderr
    assert "Traceback" not in engine.stderr


def test_the_engine_wheel_runs_on_the_client_without_the_catalog_server(dist: dict[str, Path], tmp_path: Path) -> None:
    wheels = [dist["lakesession-core"], dist["lakesession-client"], dist["lakesession-engine"]]
    bin_ = _venv(tmp_path / "venv", *wheels)
    installed = _installed(bin_)
    assert {"lakesession-engine", "lakesession-client", "lakesession-core", "grpcio"} <= installed
    assert installed & (SERVER_STACK | {"lakesession-catalog", "lakesession"}) == set()
    env = _clean_env(HOME=str(tmp_path))
    out = _run([str(bin_ / "lakesession"), "engine", "--help"], env=env, cwd=tmp_path)
    assert "--tls-cert" in out.stdout and "Traceback" not in out.stderr


def test_the_catalog_wheel_holds_no_spark_and_serves(dist: dict[str, Path], tmp_path: Path) -> None:
    bin_ = _venv(tmp_path / "venv", dist["lakesession-core"], dist["lakesession-catalog"])
    installed = _installed(bin_)
    assert {"lakesession-catalog", "lakesession-core", "fastapi", "uvicorn", "moto"} <= installed
    assert installed & {"pyspark", "py4j", "hypercorn", "ipython", "jupyterlab"} == set()
    assert not (bin_ / "lakesession").exists()  # the client's command is the client's
    script = (  # the package imports without the client; its names say what to install, in one line
        "import sys, pathlib, lakesession\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('lakesession.'))\n"
        "try:\n    lakesession.spark()\nexcept lakesession.errors.ClientMissingError as e:\n    print(e)\n"
        "print((pathlib.Path(lakesession.__file__).parent / 'session.py').exists())\n"
        "print(loaded)\n"
    )
    out = _run([str(bin_ / "python"), "-c", script], env=_clean_env(HOME=str(tmp_path)), cwd=tmp_path)
    said, client_file, loaded = out.stdout.strip().splitlines()[-3:]
    assert said.startswith("lakesession.spark is lakesession's client") and "./core ./client" in said, out
    assert client_file == "False", out  # the core carries none of the client's modules
    assert loaded == "[]", out
    args = ["--port", "0", "--data-dir", str(tmp_path / "d")]
    with Served(args, _clean_env(HOME=str(tmp_path)), command=[str(bin_ / "lakesession-catalog")]) as served:
        config = httpx.get(served.uri + "/v1/config", timeout=30)
    assert config.status_code in (200, 401), config.text  # it answers the REST catalog's first call
    assert served.proc.returncode == 0


CLIENT_SCRIPT = """
import json, sys
import pyarrow as pa
import lakesession
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

uri, warehouse, issuer, credential = sys.argv[1:5]
session = lakesession.connect(uri=uri, warehouse=warehouse, issuer=issuer, credential=credential)
session.catalog.create_namespace("slim")
schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
session.catalog.create_table("slim.people", schema)
table = session.table("slim.people", mode="write")
table.append(pa.table({"id": [1, 2, 3], "name": ["ada", "bob", "cy"]}))
rows = session.table("slim.people").scan().to_arrow().num_rows
gateway = session.gateway  # the loopback gateway the Spark JVM would use: hypercorn, no uvicorn
import httpx
config = httpx.get(gateway.uri + "/v1/config", headers={"Authorization": f"Bearer {gateway.secret}"}, timeout=30)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"fastapi", "uvicorn", "moto", "flask", "alembic", "sqlalchemy"})
print(json.dumps({"rows": rows, "config": config.status_code, "server_modules": loaded,
                  "reference": "lakesession.reference" in sys.modules}))
session.close()
"""


def test_client_and_catalog_in_one_venv_survive_uninstalling_either(dist: dict[str, Path], tmp_path: Path) -> None:
    """Both in one venv, then one uninstalled (each way): what remains works, the catalog serving the client."""
    wheels = [dist["lakesession-core"], dist["lakesession-client"], dist["lakesession-catalog"]]
    catalog_left, client_left = _venv(tmp_path / "a", *wheels), _venv(tmp_path / "b", *wheels)
    _uninstall(catalog_left, "lakesession-client")
    _uninstall(client_left, "lakesession-catalog")
    assert not (catalog_left / "lakesession").exists() and not (client_left / "lakesession-catalog").exists()
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        Policy().service("etl", "etl-pw-1", role="eng").grant("eng", "CATALOG_MANAGE_CONTENT", "catalog").yaml()
    )
    args = ["--port", "0", "--data-dir", str(tmp_path / "d"), "--bootstrap", str(policy)]
    command = [str(catalog_left / "lakesession-catalog")]
    with Served([*args, "--warehouse", "s3://slim-lake/wh", "--s3-emulator"], _clean_env(), command=command) as served:
        script = textwrap.dedent(CLIENT_SCRIPT)
        lines = served.lines
        out = subprocess.run(
            [
                str(client_left / "python"),
                "-c",
                script,
                served.uri,
                lines["warehouse"],
                lines["issuer"],
                "etl:etl-pw-1",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=_clean_env(HOME=str(tmp_path)),
            cwd=tmp_path,
        )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # the catalog's stack is still in the client's venv (uninstalling a distribution leaves its dependencies),
    # but the client loads none of it, and the server's package is gone with its distribution
    assert report == {"rows": 3, "config": 200, "server_modules": [], "reference": False}
    assert "etl-pw-1" not in out.stdout + out.stderr
