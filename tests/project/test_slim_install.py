"""The two slim distributions, each installed for real into a clean venv as the docs say: the client
(``pip install ./client``) carries none of the server's stack, the catalog (``pip install ./catalog``) none of
Spark, and the one works against the other (``lakesession-catalog`` serving, the client connecting).

Slow: two venvs and two installs (wheels come from pip's cache after the first run).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import venv
from pathlib import Path

import pytest

from tests._serve import Served
from tests.factories import Policy
from tests.project.test_distributions import SERVER_STACK

ROOT = Path(__file__).resolve().parents[2]


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the checkout on the path or lakesession's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESESSION_", "PYTHONPATH"))}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


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


def _install(where: Path, folder: str) -> Path:
    """A clean venv with ``pip install ./<folder>`` from this checkout, exactly as the docs say."""
    venv.EnvBuilder(with_pip=True).create(where)
    python = where / "bin" / "python"
    env = _clean_env()
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(ROOT / folder)],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        cwd=where.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return python


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _install(tmp_path_factory.mktemp("slim") / "venv", "client")


@pytest.fixture(scope="module")
def catalog_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _install(tmp_path_factory.mktemp("catalog") / "venv", "catalog")


def _pip_list(python: Path) -> set[str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=_clean_env(),
    )
    return {p["name"].lower().replace("_", "-") for p in json.loads(out.stdout)}


@pytest.mark.slow
def test_the_client_install_holds_none_of_the_server(client_venv: Path) -> None:
    installed = _pip_list(client_venv)
    assert "lakesession-client" in installed and "pyspark" in installed and "hypercorn" in installed
    assert installed & SERVER_STACK == set()
    site = subprocess.run(
        [str(client_venv), "-c", "import lakesession, pathlib; print(pathlib.Path(lakesession.__file__).parent)"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=client_venv.parent,
        env=_clean_env(),
        check=True,
    ).stdout.strip()
    assert not (Path(site) / "reference").exists() and (Path(site) / "_wire" / "referenced_by.py").exists()
    assert "site-packages" in site  # the installed copy, not the checkout


@pytest.mark.slow
def test_the_catalog_install_holds_no_spark(catalog_venv: Path) -> None:
    installed = _pip_list(catalog_venv)
    assert {"lakesession-catalog", "fastapi", "uvicorn", "moto"} <= installed
    assert installed & {"pyspark", "py4j", "hypercorn", "ipython", "jupyterlab"} == set()
    script = (  # the package imports without the client's stack; Spark says what to install, in one line
        "import sys, lakesession\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('lakesession.'))\n"
        "try:\n    lakesession.spark()\nexcept lakesession.errors.SparkMissingError as e:\n    print(e)\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [str(catalog_venv), "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=catalog_venv.parent,
        env=_clean_env(HOME=str(catalog_venv.parent)),
    )
    said, loaded = out.stdout.strip().splitlines()[-2:] if out.returncode == 0 else ("", out.stderr[-2000:])
    assert said.startswith("lakesession.spark() needs pyspark") and "pip install 'pyspark" in said, out
    assert loaded == "[]", out


@pytest.mark.slow
def test_the_client_install_works_against_the_catalog_install(
    client_venv: Path, catalog_venv: Path, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        Policy().service("etl", "etl-pw-1", role="eng").grant("eng", "CATALOG_MANAGE_CONTENT", "catalog").yaml()
    )
    args = ["--port", "0", "--data-dir", str(tmp_path / "d"), "--bootstrap", str(policy)]
    command = [str(catalog_venv.parent / "lakesession-catalog")]
    with Served([*args, "--warehouse", "s3://slim-lake/wh", "--s3-emulator"], _clean_env(), command=command) as served:
        out = subprocess.run(
            [
                str(client_venv),
                "-c",
                textwrap.dedent(CLIENT_SCRIPT),
                served.uri,
                served.lines["warehouse"],
                served.lines["issuer"],
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
    assert report == {"rows": 3, "config": 200, "server_modules": [], "reference": False}
    assert "etl-pw-1" not in out.stdout + out.stderr


@pytest.mark.slow
def test_the_client_install_says_how_to_get_the_server(client_venv: Path, tmp_path: Path) -> None:
    env = _clean_env(HOME=str(tmp_path))
    script = (
        "import lakesession\n"
        "try:\n    lakesession.connect()\nexcept lakesession.errors.CatalogServerMissingError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [str(client_venv), "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "HOME": str(tmp_path)},
    )
    assert "pip install lakesession" in out.stdout, out.stderr[-2000:]
    lakesession_cli = client_venv.parent / "lakesession"
    served = subprocess.run(
        [str(lakesession_cli), "serve"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert served.returncode == 2 and "needs lakesession's catalog server" in served.stderr
    assert "Traceback" not in served.stderr
