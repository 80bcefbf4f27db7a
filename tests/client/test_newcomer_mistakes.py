"""The mistakes a newcomer makes, as a script and a notebook show them: one line each, naming the fix (#42).

Fast set, in this process against a reference catalog on loopback: each mistake's real error, shown by the hook an
uncaught error in a script meets (``sys.excepthook``: at most 3 stderr lines — the line, where the traceback is,
``LAKESESSION_TRACEBACK=1`` — never a traceback) and by an IPython shell *without* ``%load_ext lakesession`` (one
line, ``_render_traceback_``). Slow set: each mistake as a real script (``sys.executable``, its stderr counted as a
terminal shows it), all at once; eleven fresh interpreters importing pyiceberg cost ~30 s of CPU.

Before (main f5012d9, measured): a wrong URL was ``TokenRefreshError`` "This is usually temporary … retry" after
retries, or with a static token ``requests.ConnectionError`` (no URL setting named); every uncaught case printed
13-57 lines; Java 25 passed the check ("11+") and Spark died at start; a typo'd table said no "did you mean".
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lakesession
from lakesession.reference import ReferenceCatalog
from tests.conftest import SECRETS
from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy

POLICY = shop_policy("nm", others=("nobody",))  # the slow scripts' own catalog, on the S3 emulator
SECRET = {"reader": "reader-secret-nm", "nobody": "nobody-secret-nm", "etl": "etl-secret-nm"}


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def expired_token() -> str:
    """An unsigned JWT whose ``exp`` is long past (a static token pasted yesterday)."""

    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'sub': 'reader', 'exp': 1_000_000_000, 'iat': 999_996_400})}.sig"


HEADER = """
import sys, pyarrow as pa, lakesession
uri, token_url, closed, expired = sys.argv[1:5]
def login(who, secret, **kw):
    kw.setdefault("warehouse", "lakesession")
    return lakesession.connect(uri=uri, credential=f"{who}:{secret}", token_url=token_url, **kw)
"""
#: mistake -> (the script's body, what its one line must say)
MISTAKES: dict[str, tuple[str, tuple[str, ...]]] = {
    "wrong URL (client credentials)": (
        'lakesession.connect(uri=f"http://127.0.0.1:{closed}", credential="reader:x").table("shop.orders")',
        ("IssuerUnreachableError", "http://127.0.0.1:{closed}", "uri= (LAKESESSION_URI)"),
    ),
    "wrong URL (token)": (
        'lakesession.connect(uri=f"http://127.0.0.1:{closed}", token="t").table("shop.orders")',
        ("CatalogUnreachableError", "http://127.0.0.1:{closed}", "uri= (LAKESESSION_URI)"),
    ),
    "wrong warehouse": (
        f'login("reader", "{SECRET["reader"]}", warehouse="lakehouse").table("shop.orders")',
        ("ConfigError", "'lakehouse'", "check warehouse="),
    ),
    "typo'd table": (
        f'login("reader", "{SECRET["reader"]}").table("shop.ordrs")',  # reader may not list shop: its grants tell
        ("CatalogAccessError", "shop.ordrs as reader", "Did you mean shop.orders (granted to you)?"),
    ),
    "mistyped namespace": (
        f'login("reader", "{SECRET["reader"]}").table("shp.orders")',
        ("CatalogAccessError", "shp.orders as reader", "Did you mean shop.orders (granted to you)?"),
    ),
    "expired login": (
        'lakesession.connect(uri=uri, token=expired, warehouse="lakesession").table("shop.orders")',
        ("LoginRequiredError", "expired", "lakesession.connect(token=...)"),
    ),
    "no grant": (
        f'login("nobody", "{SECRET["nobody"]}").table("shop.orders")',
        ("CatalogAccessError", "shop.orders as nobody", "TABLE_READ_DATA on table shop.orders"),
    ),
    "read-only write": (
        f'login("reader", "{SECRET["reader"]}").table("shop.orders").append(pa.table({{"id": [3], "item": ["fig"]}}))',
        ("StorageAccessError", "shop.orders", "TABLE_WRITE_DATA"),
    ),
    "offline": (  # no jar cached, the Maven repository unreachable (LAKESESSION_MAVEN_URL: a closed port)
        "lakesession.spark(uri=uri, token='t')",
        ("JarResolutionError", "http://127.0.0.1:{closed}/maven2", "is not reachable", "Fix:"),
    ),
    "no Java": (
        "lakesession.spark(uri=uri, token='t')",
        ("JavaNotFoundError", "no java on PATH", "Java 17 or 21", "apt-get install"),
    ),
    "Java 25": (
        "lakesession.spark(uri=uri, token='t')",
        ("JavaNotFoundError", "is Java 25.0.3", "Java 17 or 21", "Fix:"),
    ),
}


def _fake_java(home: Path, version: str) -> Path:
    """A JDK folder whose ``java -version`` says ``version`` (the check reads no more of it)."""
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2025-09-16' >&2\n")
    java.chmod(0o755)
    return home


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(POLICY, bucket="newcomer", data_dir=tmp_path_factory.mktemp("newcomer")) as handle:
        with lakesession.connect(
            uri=handle.uri,
            credential=f"etl:{SECRET['etl']}",
            token_url=f"{handle.issuer_uri}/token",
            warehouse="lakesession",
        ) as etl:
            etl.catalog.create_namespace("shop")
            etl.catalog.create_table(("shop", "orders"), SCHEMA)
            etl.table("shop.orders").append(ROWS)
        yield handle


#: the fast set's mistakes on the suite's shared catalog (alice reads and lists namespace sales; bob has no grant)
FAST = {
    **{k: v for k, v in MISTAKES.items() if k not in ("read-only write",)},  # a write refused needs the S3 store
    "wrong warehouse": (
        f'login("alice", "{SECRETS["alice"]}", warehouse="lakehouse").table("sales.newcomer_orders")',
        ("ConfigError", "'lakehouse'", "check warehouse="),
    ),
    "typo'd table": (
        f'login("alice", "{SECRETS["alice"]}").table("sales.newcomer_ordrs")',
        ("TableNotFoundError", "sales.newcomer_ordrs", "did you mean sales.newcomer_orders?"),
    ),
    "mistyped namespace": (
        f'login("bob", "{SECRETS["bob"]}").table("sale.newcomer_orders")',
        ("CatalogAccessError", "sale.newcomer_orders as bob", "TABLE_READ_DATA on table sale.newcomer_orders"),
    ),
    "no grant": (
        f'login("bob", "{SECRETS["bob"]}").table("sales.newcomer_orders")',
        ("CatalogAccessError", "sales.newcomer_orders as bob", "TABLE_READ_DATA on table sales.newcomer_orders"),
    ),
    "expired login": (
        'lakesession.connect(uri=uri, token=expired, warehouse="lakesession").table("sales.newcomer_orders")',
        ("LoginRequiredError", "expired", "lakesession.connect(token=...)"),
    ),
}


@pytest.fixture(scope="module")
def shared(catalog: ReferenceCatalog) -> ReferenceCatalog:
    """The suite's shared catalog with ``sales.newcomer_orders`` (no data: loading it is all these need)."""
    with lakesession.connect(
        uri=catalog.uri, credential=f"etl:{SECRETS['etl']}", token_url=f"{catalog.issuer_uri}/token"
    ) as etl:
        etl.catalog.create_namespace_if_not_exists("sales")
        etl.catalog.create_table_if_not_exists(("sales", "newcomer_orders"), SCHEMA)
    return catalog


@pytest.fixture(scope="module")
def errors(shared: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[BaseException, int]]:
    """Every mistake's error, raised in this process: name -> (the exception, the closed port it names)."""
    cat = shared
    fake25 = _fake_java(tmp_path_factory.mktemp("java") / "jdk-25", "25.0.3")
    found: dict[str, tuple[BaseException, int]] = {}
    saved = {
        k: os.environ.get(k)
        for k in ("JAVA_HOME", "PATH", "LAKESESSION_JVM_DIRS", "LAKESESSION_MAVEN_URL", "LAKESESSION_CACHE_DIR")
    }
    try:
        for name, (body, _) in FAST.items():
            os.environ.pop("JAVA_HOME", None)
            port = closed_port()
            if name == "no Java":
                os.environ.update(PATH="/nonexistent", LAKESESSION_JVM_DIRS="")
            if name == "Java 25":
                os.environ["JAVA_HOME"] = str(fake25)
            if name in ("no Java", "Java 25"):  # what spark() checks first, before any jar or JVM
                body = "from lakesession._spark.jars import check_java; check_java()"
            if name == "offline":  # what spark() does next: resolve the jars (nothing cached, no repository)
                os.environ.update(
                    LAKESESSION_MAVEN_URL=f"http://127.0.0.1:{port}/maven2",
                    LAKESESSION_CACHE_DIR=str(tmp_path_factory.mktemp("offline-cache")),
                )
                body = "from lakesession._spark.jars import resolve_jars; resolve_jars('auto')"
            argv = ["x", cat.uri, f"{cat.issuer_uri}/token", str(port), expired_token()]
            code = textwrap.dedent(HEADER).replace("sys.argv[1:5]", repr(argv[1:5])) + body
            try:
                exec(compile(code, f"<{name}>", "exec"), {})
            except Exception as exc:
                found[name] = (exc, port)
            else:
                raise AssertionError(f"{name}: no error")
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return found


@pytest.mark.parametrize("mistake", list(FAST))
def test_each_mistake_uncaught_is_at_most_three_lines_naming_the_fix(
    errors: dict[str, tuple[BaseException, int]],
    mistake: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    exc, port = errors[mistake]
    monkeypatch.setenv("LAKESESSION_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LAKESESSION_TRACEBACK", raising=False)
    monkeypatch.setattr(lakesession, "_in_ipython", lambda: False)  # as in a script (pytest may run under IPython)
    capsys.readouterr()
    lakesession._excepthook(type(exc), exc, exc.__traceback__)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    shown = "\n".join(lines)
    assert 1 <= len(lines) <= 3 and lines[0].startswith("lakesession: "), shown
    for said in FAST[mistake][1]:
        assert said.format(closed=port) in lines[0], shown
    assert "usually temporary" not in shown and SECRETS["alice"] not in shown
    assert "Traceback" in (tmp_path / "last-traceback.txt").read_text()


@pytest.mark.parametrize("mistake", list(FAST))
def test_each_mistake_in_a_notebook_without_the_extension_is_one_line(
    errors: dict[str, tuple[BaseException, int]], mistake: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    exc, _ = errors[mistake]
    shell = InteractiveShell.instance()
    shell.user_ns["_mistake"] = exc
    capsys.readouterr()
    result = shell.run_cell("raise _mistake")
    shown = capsys.readouterr()
    text = (shown.out + shown.err).strip()
    assert result.error_in_exec is exc
    assert len(text.splitlines()) == 1 and text.startswith("\x1b[31mlakesession: "), text
    assert "Traceback" not in text and "Fix" in text, text


@pytest.fixture(scope="module")
def runs(cat: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every mistake's script, run at once: name -> (return code, stderr lines, seconds, closed port)."""
    folder = tmp_path_factory.mktemp("mistakes")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESESSION_", "AWS_", "PYICEBERG_"))}
    base.update(LAKESESSION_CACHE_DIR=str(folder), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    empty = folder / "empty-bin"
    empty.mkdir()
    started: dict[str, tuple[subprocess.Popen[str], float, int]] = {}
    for i, (name, (body, _)) in enumerate(MISTAKES.items()):
        script = folder / f"mistake{i}.py"
        script.write_text(textwrap.dedent(HEADER) + body + "\n")
        env = dict(base)
        if name == "no Java":
            env.pop("JAVA_HOME", None)
            env.update(PATH=str(empty), LAKESESSION_JVM_DIRS="")
        if name == "Java 25":
            env.update(JAVA_HOME=str(_fake_java(folder / "jdk-25", "25.0.3")))
        port = closed_port()
        if name == "offline":
            env.update(
                LAKESESSION_MAVEN_URL=f"http://127.0.0.1:{port}/maven2", LAKESESSION_CACHE_DIR=str(folder / "no-jars")
            )
        args = [sys.executable, str(script), cat.uri, f"{cat.issuer_uri}/token", str(port), expired_token()]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=folder)
        started[name] = (proc, time.monotonic(), port)
    done: dict[str, Any] = {}
    for name, (proc, t0, port) in started.items():
        _, err = proc.communicate(timeout=180)
        done[name] = (proc.returncode, [line for line in err.splitlines() if line.strip()], time.monotonic() - t0, port)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_mistake_in_a_script_is_at_most_three_lines_naming_the_fix(runs: dict[str, Any], mistake: str) -> None:
    code, lines, took, port = runs[mistake]
    shown = "\n".join(lines)
    assert code == 1, shown
    assert 1 <= len(lines) <= 3, shown
    assert "Traceback" not in shown and "\tat " not in shown, shown
    first = lines[0]
    assert first.startswith("lakesession: "), shown
    for said in MISTAKES[mistake][1]:
        assert said.format(closed=port) in first, shown
    assert "LAKESESSION_TRACEBACK=1" in lines[1] and "last-traceback.txt" in lines[1], shown
    assert "usually temporary" not in first and SECRET["reader"] not in shown
    assert took < 120, f"{mistake}: {took:.0f} s"  # eleven interpreters at once on a shared machine


def test_the_traceback_is_where_the_line_says_and_the_switch_prints_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESESSION_")}
    env.update(LAKESESSION_CACHE_DIR=str(tmp_path), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    code = "import lakesession.errors as e\nraise e.ConfigError('bad value\\nof warehouse=')"
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert quiet.stderr.splitlines()[0] == "lakesession: ConfigError: bad value of warehouse=", quiet.stderr
    saved = (tmp_path / "last-traceback.txt").read_text()
    assert "Traceback" in saved and "ConfigError: bad value" in saved
    assert oct((tmp_path / "last-traceback.txt").stat().st_mode & 0o777) == "0o600"
    loud = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**env, "LAKESESSION_TRACEBACK": "1"},
        timeout=60,
    )
    assert loud.stderr.startswith("Traceback") and "lakesession.errors.ConfigError: bad value" in loud.stderr
    # anything else keeps Python's own report, and Ctrl-C stays Ctrl-C
    other = subprocess.run(
        [sys.executable, "-c", "import lakesession\nraise KeyError('k')"], capture_output=True, text=True, env=env
    )
    assert other.stderr.startswith("Traceback") and other.stderr.rstrip().endswith("KeyError: 'k'")
    ctrl_c = subprocess.run(
        [sys.executable, "-c", "import lakesession\nraise KeyboardInterrupt"], capture_output=True, text=True, env=env
    )
    assert ctrl_c.stderr.rstrip().endswith("KeyboardInterrupt") and ctrl_c.returncode != 0
