"""What an import really loads: each check runs a fresh ``python -c`` on this checkout and reads ``sys.modules``.

``test_distributions.py`` checks the import rules on the source (AST); these check the outcome, which the
AST cannot see (a package ``__init__`` that imports half the client, a module-level pyspark import three
modules down): the catalog server loads no client module, ``import lakesession`` loads nothing until a name is
used, a Session for catalogs, tables and grants never imports pyspark, and without pyspark ``spark()`` says
in one line what to install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import lakesession
from lakesession.errors import ConfigError, LakesessionError, SparkMissingError
from tests._serve import Served
from tests.factories import Policy

pytestmark = pytest.mark.slow  # fresh interpreters, one per boundary: the slow group

ROOT = Path(__file__).resolve().parents[2]
#: the modules both halves may load: the server's own, the wire rules, and the (lazy) package itself
SERVER_SIDE = ("lakesession.reference", "lakesession._wire")
SPARK = ("pyspark", "py4j")

#: a finder that makes pyspark unimportable, as in the lakesession-catalog install (and records who asked)
NO_PYSPARK = """
import importlib.abc, sys
asked = []
class NoPyspark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j"):
            asked.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoPyspark())
"""


def _env(home: Path) -> dict[str, str]:
    """This interpreter's environment on this checkout, without lakesession's or pyiceberg's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESESSION_", "PYICEBERG_", "PYTHONPATH"))}
    return {**env, "PYTHONPATH": str(ROOT), "HOME": str(home), "LAKESESSION_HOME": str(home / "lakesession")}


def _run(code: str, home: Path, *args: str) -> dict[str, object]:
    """Run ``code`` (whose last line printed is JSON) in a fresh interpreter; that JSON."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=home,
        env=_env(home),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


LOADED = """
import json, sys
print(json.dumps(sorted(sys.modules)))
"""


def _loaded_after(statement: str, home: Path) -> list[str]:
    return _run(statement + "\n" + LOADED, home)  # type: ignore[return-value]


def _spark(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in SPARK]


def test_the_catalog_server_loads_no_client_module_and_no_spark(tmp_path: Path) -> None:
    """The server's package, its ``lakesession-catalog`` command and its app: nothing of the client rides along."""
    modules = _loaded_after(
        "import lakesession.reference, lakesession.reference.servecmd, lakesession.reference.app", tmp_path
    )
    assert "lakesession.reference.servecmd" in modules and "lakesession._wire" in modules  # it did import
    client = [m for m in modules if m.startswith("lakesession.") and not m.startswith(SERVER_SIDE)]
    assert client == []
    assert _spark(modules) == []


def test_import_lakesession_loads_nothing_until_a_name_is_used(tmp_path: Path) -> None:
    modules = _loaded_after("import lakesession\nassert lakesession.__version__", tmp_path)
    assert [m for m in modules if m.startswith("lakesession")] == ["lakesession"]
    assert _spark(modules) == []
    assert "pyiceberg.catalog.rest" not in modules and "hypercorn" not in modules
    used = _loaded_after("import lakesession\nlakesession.connect", tmp_path)
    assert "lakesession.session" in used and "lakesession.gateway" in used  # the first use imports them
    assert _spark(used) == []


def test_the_public_names_resolve_lazily_and_stay_put() -> None:
    """``from lakesession import …``, ``dir()``, submodules by attribute, and a clear AttributeError."""
    from lakesession import (
        Session,
        Settings,
        _connect,
        connect,
        current_session,
        load_ipython_extension,
        notebook,
        session,
        spark,
    )

    assert (connect, spark, current_session) == (_connect.connect, _connect.spark, _connect.current_session)
    assert Session is session.Session and load_ipython_extension is notebook.load_ipython_extension
    assert Settings.__name__ == "Settings"
    assert set(lakesession.__all__) <= set(dir(lakesession)) and lakesession.__all__ == sorted(lakesession.__all__)
    assert lakesession.errors.ConfigError is ConfigError  # a submodule by attribute, as before the lazy init
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        lakesession.no_such_name  # noqa: B018


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A real catalog (``lakesession serve``) holding one table, ``ns.t``, that service ``etl`` may manage."""
    where = tmp_path_factory.mktemp("boundaries")
    policy = where / "policy.yaml"
    policy.write_text(
        Policy().service("etl", "etl-pw-1", role="eng").grant("eng", "CATALOG_MANAGE_CONTENT", "catalog").yaml()
    )
    args = ["--port", "0", "--data-dir", str(where / "d"), "--bootstrap", str(policy)]
    with Served([*args, "--warehouse", "s3://bounds/wh", "--s3-emulator"], _env(where)) as running:
        uri, warehouse, issuer, credential = _connect_args(running)
        with lakesession.connect(uri=uri, warehouse=warehouse, issuer=issuer, credential=credential) as s:
            s.catalog.create_namespace("ns")
            s.catalog.create_table("ns.t", pa.schema([("id", pa.int64())]))
        yield running


def _connect_args(served: Served) -> list[str]:
    return [served.uri, served.lines["warehouse"], served.lines["issuer"], "etl:etl-pw-1"]


CATALOG_ONLY = """
import json, sys, lakesession
uri, warehouse, issuer, credential = sys.argv[1:5]
# engine=: a trusted engine configured (only its URL is checked until a query needs it)
s = lakesession.connect(uri=uri, warehouse=warehouse, issuer=issuer, credential=credential,
                        engine="sc://127.0.0.1:15002")
table = s.table("ns.t")
rows = table.scan().to_arrow().num_rows
grants = s.grants()
"""


def test_a_session_for_catalogs_tables_and_grants_never_imports_pyspark(served: Served, tmp_path: Path) -> None:
    report = _run(
        CATALOG_ONLY
        + textwrap.dedent(
            """
        print(json.dumps({"rows": rows, "grants": len(grants), "modules": sorted(sys.modules)}))
        s.close()
        """
        ),
        tmp_path,
        *_connect_args(served),
    )
    assert report["rows"] == 0 and report["grants"] >= 1  # the table loaded and was read; grants answered
    modules: list[str] = report["modules"]  # type: ignore[assignment]
    assert "lakesession.session" in modules and "lakesession.gateway" in modules
    assert _spark(modules) == []


def test_without_pyspark_tables_work_and_spark_says_what_to_install_in_one_line(served: Served, tmp_path: Path) -> None:
    """The lakesession-catalog install, simulated (pyspark unimportable): ``connect``/``table``/``grants`` work,
    and ``session.spark()``, ``start_plan()`` and ``lakesession.spark()`` each raise ``SparkMissingError``."""
    report = _run(
        NO_PYSPARK
        + CATALOG_ONLY
        + textwrap.dedent(
            """
        before = list(asked)
        said = {}
        for name, call in (("session", s.spark), ("plan", s.start_plan), ("module", lakesession.spark)):
            try:
                call()
            except lakesession.errors.SparkMissingError as exc:
                said[name] = [str(exc), exc._render_traceback_()]
        print(json.dumps({"rows": rows, "asked_before_spark": before, "said": said,
                          "current": lakesession.current_session() is None}))
        s.close()
        """
        ),
        tmp_path,
        *_connect_args(served),
    )
    assert report["rows"] == 0 and report["asked_before_spark"] == []
    said: dict[str, list[object]] = report["said"]  # type: ignore[assignment]
    assert set(said) == {"session", "plan", "module"}
    assert report["current"] is True  # the failed lakesession.spark() left no half-made current session
    pin = next(
        r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"] if "pyspark" in r
    )
    for message, rendered in said.values():
        assert isinstance(message, str) and "\n" not in message
        assert "needs pyspark" in message and "no module 'pyspark'" in message
        assert f"pip install '{pin}'" in message, (pin, message)  # the install the full distribution pins
        assert rendered == [f"\x1b[31mlakesession: {message}\x1b[0m"]  # a notebook shows that one line
    assert said["module"][0].startswith("lakesession.spark() needs pyspark")
    assert said["session"][0].startswith("session.spark() needs pyspark")


def test_spark_missing_is_a_config_error_in_the_one_tree() -> None:
    assert issubclass(SparkMissingError, ConfigError) and issubclass(SparkMissingError, LakesessionError)
    assert "SparkMissingError" in (lakesession.errors.__doc__ or "")
