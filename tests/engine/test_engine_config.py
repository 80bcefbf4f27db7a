"""The engine refuses unsafe or broken configurations before it starts anything (no JVM, no port)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesession.engine import Engine, EngineConfig
from lakesession.engine._cli import main
from lakesession.errors import ConfigError


def config(**options: object) -> EngineConfig:
    return EngineConfig(catalog="http://catalog.invalid", client_secret="s", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"host": "0.0.0.0"}, "plaintext"),
        ({"gateway_host": "10.0.0.5"}, "--gateway-client"),
        ({"tls_cert": "/nonexistent.pem", "tls_key": "/nonexistent.key"}, "cannot read the engine's TLS files"),
        ({"tls_cert": "/nonexistent.pem"}, "both tls_cert and tls_key"),
    ],
)
def test_unsafe_or_broken_settings_fail_before_anything_starts(options: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Engine(config(**options))


def test_a_routable_front_door_is_allowed_behind_a_tls_proxy_and_gateways_with_named_hosts() -> None:
    engine = Engine(config(host="0.0.0.0", insecure=True, gateway_host="10.0.0.5", gateway_clients=["10.0.0.0/24"]))
    assert engine.port == 0 and engine.spark is None  # nothing started


def test_the_secret_never_comes_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--catalog", "http://catalog.invalid", "--client-secret", "s3cret"])
    assert "unrecognized arguments" in capsys.readouterr().err
    assert main(["--catalog", "http://catalog.invalid", "--client-secret-file", str(tmp_path / "missing")]) == 2
    assert "cannot read client_secret_file" in capsys.readouterr().err


def test_the_operators_conf_cannot_switch_off_the_sandbox() -> None:
    engine = Engine(config(spark_conf={"spark.lakesession.engine.sandbox": "false", "spark.ui.enabled": "true"}))
    conf = engine.jvm_conf(15999)
    assert conf["spark.lakesession.engine.sandbox"] == "true" and conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.extensions"].endswith("dev.lakesession.engine.SandboxExtensions")
