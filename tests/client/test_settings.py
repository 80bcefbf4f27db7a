"""Typed entry points and the one settings object: signatures, precedence, the variable registry, fix-it hints."""

from __future__ import annotations

import ast
import dataclasses
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
    assert set(connect.parameters) - {"catalog", "settings"} == fields  # every parameter is a documented setting
    assert not any(name.startswith("_") for name in connect.parameters)


@pytest.mark.parametrize("entry", ["connect", "spark"])
def test_entry_point_keywords_are_the_settings_fields_with_their_defaults(entry: str) -> None:
    """Adding an option to ``Settings`` without the keyword (or the reverse) fails here: names, order, defaults."""
    params = inspect.signature(getattr(lakesession, entry)).parameters
    fields = [f for f in dataclasses.fields(Settings) if f.metadata]
    keywords = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY and n != "settings"]
    assert keywords == [f.name for f in fields]
    for f in fields:
        default = params[f.name].default
        # None means "not given": Settings' own default applies (catalog_name='lake', access, comet=False)
        assert default is None or default == f.default, (
            f"{entry}({f.name}=...) defaults to {default!r}, not {f.default!r}"
        )
        assert "None" in str(params[f.name].annotation), f"{entry}({f.name}=...) cannot be left unset"
    assert next(iter(params)) == "catalog" and params["settings"].default is None
    assert "Settings" in str(params["settings"].annotation)


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


# -- settings=: one object, keyword arguments over it, the environment and config file beneath ----------------------
def test_settings_argument_with_keywords_overriding_its_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESESSION_SPARK_MASTER", "local[2]")  # neither sets master: the variable fills it
    monkeypatch.setenv("LAKESESSION_GATEWAY_HOST", "127.0.0.2")  # the Settings' own field wins over it
    shared = Settings(uri="http://127.0.0.1:9/", token="t", warehouse="w-shared", catalog_name="cat")
    shared = Settings(**{**shared.explicit, "gateway_host": "127.0.0.1", "access": "remote-signing"})
    assert shared.given == {"uri", "token", "warehouse", "catalog_name", "gateway_host", "access"}
    session = lakesession.connect(settings=shared, warehouse="w-mine", access="vended-credentials")
    try:
        assert (session.uri, session.warehouse, session.catalog_name) == ("http://127.0.0.1:9", "w-mine", "cat")
        assert session.access == "vended-credentials"  # the keyword, over the Settings' remote-signing
        assert (session._master, session._gateway_host) == ("local[2]", "127.0.0.1")
    finally:
        session.close()
    with pytest.raises(ConfigError, match="need a catalog"):  # a Settings' fields count as given
        lakesession.connect(settings=Settings(token="t"))


def test_settings_check_their_values_once_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import lakesession._connect as entry
    import lakesession._settings as settings_mod

    calls: list[object] = []
    check = settings_mod.check_access
    monkeypatch.setattr(settings_mod, "check_access", lambda value: calls.append(value) or check(value))
    monkeypatch.setenv("LAKESESSION_WARMUPS", "none")
    s = Settings.resolve(None, {"uri": "http://127.0.0.1:9", "token": "t", "access": "remote-signing"})
    assert calls == ["remote-signing"]  # file, environment and arguments merged, then checked once
    assert s.warmups == "none" and s.given == {"uri", "token", "access"}

    def no_session(*_a: object, **_k: object) -> None:
        raise AssertionError("a Session was built from settings that are wrong")

    monkeypatch.setattr(entry, "Session", no_session)
    with pytest.raises(ConfigError, match="access must be one of"):
        lakesession.connect(settings=s, access="magic")  # type: ignore[arg-type]
    monkeypatch.setenv("LAKESESSION_EMBEDDED_STORAGE", "tape")
    with pytest.raises(ConfigError, match="embedded storage 'tape'"):
        lakesession.connect()
    monkeypatch.setenv("LAKESESSION_EMBEDDED_STORAGE", "file")
    monkeypatch.setenv("LAKESESSION_EMBEDDED_CREDENTIAL_TTL", "an hour")
    with pytest.raises(ConfigError, match="CREDENTIAL_TTL='an hour'.*Fix:"):
        lakesession.connect()


def test_an_unknown_access_value_names_the_fix() -> None:
    fix = r"access must be one of vended-credentials, remote-signing, not 'magic'\. Fix: access='vended-credentials'"
    with pytest.raises(ConfigError, match=fix):
        Settings(access="magic")
    with pytest.raises(ConfigError, match=fix):
        lakesession.connect(uri="http://127.0.0.1:9", token="t", access="magic")  # type: ignore[arg-type]
    from lakesession.session import Session

    with pytest.raises(ConfigError, match=fix):  # the Session's own door: the same check
        Session("http://127.0.0.1:9", None, access="magic")


def test_spark_takes_settings_and_its_keywords_override_them() -> None:
    pytest.importorskip("pyspark")
    before = lakesession.current_session()
    with pytest.raises(ConfigError, match="access must be one of"):
        lakesession.spark(settings=Settings(uri="http://127.0.0.1:9", token="t"), access="magic")  # type: ignore[arg-type]
    assert lakesession.current_session() is before  # a wrong option leaves the current session be


def test_every_option_variable_is_resolved_by_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nine variables once read at their use sites: Settings has them, converted; the helpers read none."""
    values = {
        "LAKESESSION_SPARK_MASTER": "local[3]",
        "LAKESESSION_GATEWAY_HOST": "0.0.0.0",
        "LAKESESSION_GATEWAY_CLIENTS": " 10.0.0.0/8, ,spark-driver ",
        "LAKESESSION_CLOUDS": "gcs",
        "LAKESESSION_WARMUPS": "catalog",
        "LAKESESSION_HOME": str(tmp_path),
        "LAKESESSION_EMBEDDED_STORAGE": "FILE",
        "LAKESESSION_EMBEDDED_CREDENTIAL_TTL": "60",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    s = Settings.resolve()
    assert (s.master, s.gateway_host, s.gateway_clients) == ("local[3]", "0.0.0.0", ["10.0.0.0/8", "spark-driver"])
    assert (s.clouds, s.warmups, s.data_dir) == ("gcs", "catalog", tmp_path / "embedded")
    assert (s.storage, s.credential_ttl, s.given) == ("file", 60, frozenset())
    # variables meant for the embedded default stay unused with a catalog (they were not given)
    session = lakesession.connect(uri="http://127.0.0.1:9", token="t")
    try:
        assert session._clouds == {"gcs"} and session.warmups == {"catalog"}
    finally:
        session.close()
    options = {v.option for v in ENVIRONMENT if v.option and not v.read_at}
    assert options == {f.name for f in dataclasses.fields(Settings) if f.metadata and f.metadata["env"]}
    assert {v.option for v in ENVIRONMENT if v.option} - options == {"jars"}  # the one listed exception


# os.environ.get("X") / environ["X"] / env.get(X_ENV) / env.pop(X_VAR): a read of an environment mapping
_READ = re.compile(
    r"""\benv(?:iron)?(?:\.(?:get|pop))?\s*[(\[]\s*(?:["'](LAKESESSION_[A-Z0-9_]+)["']|([A-Z_]+)\b)"""
    r"""(?!\s*\]\s*=(?!=))"""  # not a write: env[X] = ...
)
_CONSTANT = re.compile(r"""^([A-Z_]+)\s*=\s*["'](LAKESESSION_[A-Z0-9_]+)["']""", re.MULTILINE)


def test_only_settings_reads_option_variables_and_every_other_reader_is_listed() -> None:
    """A session option's variable read anywhere but ``_settings`` fails here; so does a client-side variable that is
    neither an option nor listed with its reader and reason (``lakesession._environment``)."""
    by_name = {v.name: v for v in ENVIRONMENT}
    read: dict[str, set[str]] = {}
    constants = {k: v for path in CLIENT_SOURCES for k, v in _CONSTANT.findall(path.read_text())}  # imported too
    for path in CLIENT_SOURCES:
        text = path.read_text()
        for literal, constant in _READ.findall(text):
            name = literal or constants.get(constant)
            if name:
                read.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert "LAKESESSION_WARMUPS" not in read and "LAKESESSION_HOME" not in read
    assert read["LAKESESSION_JARS"] == {"_spark/jars.py"}  # the scan sees a constant's read, a literal's, a pop
    assert {"LAKESESSION_TRACEBACK", "LAKESESSION_SPARK_SECRET_FILE", "LAKESESSION_HUB_ACCESS_TOKEN"} <= set(read)
    for name, where in read.items():
        v = by_name.get(name)
        assert v is not None, f"{name} read in {where} is not in ENVIRONMENT"
        if v.side != "client":
            continue
        assert v.read_at, f"{name} (option {v.option}) is read in {where}: take it from Settings instead"
    unlisted = [v.name for v in ENVIRONMENT if v.side == "client" and not v.option and not v.read_at]
    assert not unlisted, f"client variables read outside Settings without a reason: {unlisted}"
