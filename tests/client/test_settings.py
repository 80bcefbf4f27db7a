"""Typed entry points and the one settings object: signatures, precedence, the variable registry, fix-it hints."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import lakesession
from lakesession import Settings
from lakesession._settings import ENVIRONMENT
from lakesession.errors import ConfigError, UnknownOptionError

ROOT = Path(lakesession.__file__).parent
CLIENT_SOURCES = [p for p in ROOT.rglob("*.py") if "reference" not in p.relative_to(ROOT).parts]


def test_entry_points_take_explicit_keywords_and_the_same_ones() -> None:
    connect, spark = inspect.signature(lakesession.connect), inspect.signature(lakesession.spark)
    for sig in (connect, spark):
        kinds = {p.kind for p in sig.parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds
        assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values())
    assert list(connect.parameters) == list(spark.parameters)
    fields = {f for f in Settings.__dataclass_fields__ if f != "given"}
    assert set(connect.parameters) - {"catalog"} == fields  # every parameter is a documented setting
    assert not any(name.startswith("_") for name in connect.parameters)


def test_a_typo_is_refused_by_python_itself() -> None:
    with pytest.raises(TypeError, match="warehous"):
        lakesession.connect(uri="http://127.0.0.1:9", token="t", warehous="x")  # type: ignore[call-arg]


def test_arguments_win_over_environment_over_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("default: prod\ncatalogs:\n  prod: {uri: http://file:1, warehouse: from-file, scope: s-file}\n")
    monkeypatch.setenv("LAKESESSION_CONFIG", str(cfg))
    monkeypatch.setenv("LAKESESSION_WAREHOUSE", "from-env")
    monkeypatch.delenv("LAKESESSION_URI", raising=False)
    s = Settings.resolve(None, {"scope": "s-arg"})
    assert (s.uri, s.warehouse, s.scope) == ("http://file:1", "from-env", "s-arg")
    assert s.given == {"scope"}


def test_a_config_file_typo_names_the_keys_that_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("catalogs:\n  prod: {uri: http://x:1, warehose: w}\n")
    monkeypatch.setenv("LAKESESSION_CONFIG", str(cfg))
    with pytest.raises(UnknownOptionError, match=r"'warehose'.*Fix: use one of .*warehouse"):
        lakesession.connect("prod")


def test_embedded_default_refuses_catalog_only_arguments_and_remote_refuses_embedded_ones() -> None:
    with pytest.raises(ConfigError, match="need a catalog: pass uri="):
        lakesession.connect(token="t")
    with pytest.raises(ConfigError, match="embedded default only"):
        lakesession.connect(uri="http://127.0.0.1:9", token="t", credential_ttl=60)
    with pytest.raises(ConfigError, match="access must be one of"):
        lakesession.connect(uri="http://127.0.0.1:9", token="t", access="magic")  # type: ignore[arg-type]


def test_settings_repr_hides_secrets() -> None:
    s = Settings.resolve(None, {"uri": "http://x:1", "token": "tok-SECRET", "client_secret": "cs-SECRET"})
    assert "SECRET" not in repr(s) and "uri='http://x:1'" in repr(s)


def test_every_variable_the_client_reads_is_registered() -> None:
    registered = {v.name for v in ENVIRONMENT}
    found: dict[str, str] = {}
    for path in CLIENT_SOURCES:
        for name in re.findall(r"LAKESESSION_[A-Z0-9_]*[A-Z0-9](?:__<KEY>)?", path.read_text()):
            found.setdefault(name, str(path.relative_to(ROOT)))
    prefixes = {n.split("<")[0] for n in registered if "<" in n}
    missing = {n: p for n, p in found.items() if n not in registered and not any(n.startswith(x) for x in prefixes)}
    assert not missing, f"LAKESESSION_* variables read but not in lakesession._settings.ENVIRONMENT: {missing}"
    assert len(registered) == len(ENVIRONMENT)  # no duplicates
    assert all(v.doc.endswith(".") for v in ENVIRONMENT)


def _string_literals() -> list[str]:
    out: list[str] = []
    for path in CLIENT_SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(node.value)
    return out


def test_every_fix_it_hint_names_something_that_exists() -> None:
    from lakesession.cli import build_parser
    from lakesession.notebook import _magics

    parser = build_parser()
    commands = set()
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            commands |= set(action.choices)
    magic_source = inspect.getsource(_magics)
    session_attrs = set(dir(lakesession.Session))
    literals = _string_literals()
    for text in literals:
        for cmd in re.findall(r"`lakesession ([a-z][a-z-]+)", text):
            assert cmd in commands, f"hint names a missing CLI command `lakesession {cmd}`: {text!r}"
        for sub in re.findall(r"%lakesession ([a-z]+)", text):
            assert f'"{sub}"' in magic_source, f"hint names a missing magic %lakesession {sub}: {text!r}"
        for attr in re.findall(r"\bsession\.([a-z_]+)\(", text):
            assert attr in session_attrs, f"hint names a missing method session.{attr}(): {text!r}"
    assert any("%lakesession login" in t for t in literals)  # the scan sees the login hint
