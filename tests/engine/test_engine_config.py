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


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "engine.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_the_tls_files_are_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Engine()`` reads the key and certificate (a bad file fails before Spark starts); ``start()`` serves those
    very credentials and opens neither file again (gone by then: still serving, with one ``ssl_server_credentials``)."""
    import grpc

    from lakesession.engine import _engine
    from lakesession.engine._proxy import FrontDoor

    cert, key = _self_signed(tmp_path)
    made: list[object] = []
    real = grpc.ssl_server_credentials

    def counting(*args: object, **kwargs: object) -> object:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    served: list[object] = []
    monkeypatch.setattr(grpc, "ssl_server_credentials", counting)
    monkeypatch.setattr(_engine.Engine, "_start_spark", lambda self: 1)
    monkeypatch.setattr(
        FrontDoor, "server", lambda self, address, **kw: (served.append(kw["credentials"]), (None, 7))[1]
    )
    engine = Engine(config(tls_cert=str(cert), tls_key=str(key), token_url="http://issuer.invalid/token"))
    cert.unlink()
    key.unlink()
    try:
        engine.start()
        assert served == made and len(made) == 1, (served, made)
        assert engine.address.endswith(";use_ssl=true")
    finally:
        engine.stop()
