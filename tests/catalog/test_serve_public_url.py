"""`lakesession serve` in a container: what it advertises when bound to every interface, and the emulator's warehouse.

The catalog advertises ``base_url`` (OIDC discovery, device login, token endpoint), never a request's Host
header; bound to 0.0.0.0 without one it advertises loopback, and says so at start.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from lakesession.reference.servecmd import public_url_warning
from tests._serve import Served, run_serve

pytestmark = pytest.mark.slow  # starts fresh interpreters (the real command): the slow group

WARNING = "lakesession serve: warning: listening on 0.0.0.0 but advertising http://127.0.0.1:"


def test_every_interface_without_base_url_warns_naming_the_setting(tmp_path: Path) -> None:
    served = Served(["--host", "0.0.0.0", "--port", "0", "--data-dir", str(tmp_path)])
    assert served.stop() == 0
    err = served.proc.stderr.read()  # type: ignore[union-attr]
    assert WARNING in err and "--base-url" in err and "LAKESESSION_SERVE__BASE_URL" in err, err
    assert served.uri.startswith("http://127.0.0.1:")


def test_base_url_is_what_discovery_advertises_and_silences_the_warning(tmp_path: Path) -> None:
    served = Served(
        ["--host", "0.0.0.0", "--port", "0", "--data-dir", str(tmp_path)],
        env={"LAKESESSION_SERVE__BASE_URL": "https://catalog.example.com"},
    )
    try:
        assert served.uri == "https://catalog.example.com"
        local = served.lines["listening"]  # the bound socket, reached here at loopback
        assert local.startswith("http://127.0.0.1:")
        disco = httpx.get(local + "/oidc/.well-known/openid-configuration", headers={"Host": "evil.test"}).json()
        assert disco["issuer"] == "https://catalog.example.com/oidc"  # not the Host header
        assert disco["device_authorization_endpoint"].startswith("https://catalog.example.com/oidc/")
    finally:
        assert served.stop() == 0
    assert "warning" not in served.proc.stderr.read()  # type: ignore[union-attr]


def test_emulator_without_an_s3_warehouse_is_one_line_exit_2(tmp_path: Path) -> None:
    r = run_serve(["--port", "0", "--data-dir", str(tmp_path), "--s3-emulator"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "lakesession serve: --s3-emulator needs --warehouse s3://BUCKET/PREFIX "
        "(the default warehouse is file://DATA_DIR/warehouse)"
    ]
    assert not (tmp_path / "catalog.db").exists()  # refused before any state was made
    f = tmp_path / "team.yaml"
    f.write_text("warehouse: file:///tmp/wh\ns3_emulator: true\n")
    r = run_serve(["--port", "0", "--data-dir", str(tmp_path), "--config", str(f)])
    assert r.returncode == 2 and f"{f}:2: s3_emulator needs an s3:// warehouse" in r.stderr
    assert "the warehouse is file:///tmp/wh" in r.stderr


def test_base_url_must_be_an_http_url(tmp_path: Path) -> None:
    r = run_serve(["--port", "0", "--data-dir", str(tmp_path), "--base-url", "catalog.example.com:8181"])
    assert r.returncode == 2 and "--base-url: base_url 'catalog.example.com:8181' is not an http(s) URL" in r.stderr


@pytest.mark.parametrize(
    ("host", "uri", "warns"),
    [
        ("127.0.0.1", "http://127.0.0.1:8181", False),
        ("localhost", "http://localhost:8181", False),
        ("0.0.0.0", "http://127.0.0.1:8181", True),
        ("::", "http://[::]:8181", True),
        ("0.0.0.0", "http://localhost:8181", True),
        ("192.168.1.20", "http://192.168.1.20:8181", False),  # a LAN bind advertises that address by default
        ("192.168.1.20", "http://127.0.0.1:8181", True),
        ("0.0.0.0", "https://catalog.example.com", False),
        ("::", "http://[fd00::1]:8181", False),
    ],
)
def test_which_binds_warn(host: str, uri: str, warns: bool) -> None:
    assert (public_url_warning(host, uri) is not None) is warns
