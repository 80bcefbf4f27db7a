"""`lakesession serve` as a user runs it: a real process, its printed lines, a clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

pytestmark = pytest.mark.slow  # starts fresh interpreters (the real command): the slow group


def serve_command(tmp_path: Path, bootstrap: Path) -> list[str]:
    """``lakesession serve`` on a free port, its data under ``tmp_path``, bootstrapped from ``bootstrap``."""
    cmd = [sys.executable, "-m", "lakesession.cli", "serve", "--port", "0", "--data-dir", str(tmp_path / "d")]
    return [*cmd, "--bootstrap", str(bootstrap)]


def test_serve_prints_uris_serves_and_stops_on_sigterm(tmp_path) -> None:  # type: ignore[no-untyped-def]
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "principals:\n  - {name: etl, type: service, client_id: etl, client_secret: etl-pw-1}\n"
        "roles:\n  - {name: eng, members: [etl]}\n"
        "grants:\n  - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}\n"
    )
    proc = subprocess.Popen(
        serve_command(tmp_path, policy),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: dict[str, str] = {}
        deadline = time.monotonic() + 60
        while len(lines) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                break
            key, _, value = line.strip().partition(": ")
            if key in ("catalog", "issuer"):
                lines[key] = value
        assert set(lines) == {"catalog", "issuer"}, proc.stderr.read()  # type: ignore[union-attr]
        assert lines["issuer"] == lines["catalog"] + "/oidc"
        disco = httpx.get(lines["issuer"] + "/.well-known/openid-configuration").json()
        assert disco["issuer"] == lines["issuer"]
        cat = RestCatalog(
            "served",
            uri=lines["catalog"],
            warehouse="lakesession",
            credential="etl:etl-pw-1",
            **{"oauth2-server-uri": disco["token_endpoint"]},
        )
        cat.create_namespace("served_ns")
        assert ("served_ns",) in cat.list_namespaces()
        assert (tmp_path / "d" / "admin-credentials").stat().st_mode & 0o777 == 0o600
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    out = proc.stdout.read()  # type: ignore[union-attr]
    assert "stopped" in out
    assert "etl-pw-1" not in out and "etl-pw-1" not in proc.stderr.read()  # type: ignore[union-attr]


def test_serve_rejects_invalid_bootstrap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "p.yaml"
    bad.write_text("grants:\n  - {role: nobody, privilege: TABLE_READ_DATA, on: catalog}\n")
    r = subprocess.run(
        serve_command(tmp_path, bad),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert r.returncode == 2 and "not defined under roles" in r.stderr


@pytest.mark.slow
def test_emulator_restart_keeps_tables_and_port(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`serve --s3-emulator` keeps objects in the data dir: killed (no clean shutdown) and started again,
    it serves the same rows, on the same emulator port."""
    import socket

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from tests._serve import Served

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "principals:\n  - {name: etl, type: service, client_secret: etl-pw-2}\n"
        "roles:\n  - {name: eng, members: [etl]}\n"
        "grants:\n  - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        emu_port = s.getsockname()[1]
    args = [
        "--port", "0", "--data-dir", str(tmp_path / "d"), "--bootstrap", str(policy),
        "--warehouse", "s3://restart-lake/wh", "--s3-emulator", "--s3-emulator-port", str(emu_port),
    ]  # fmt: skip

    def catalog(srv: Served) -> RestCatalog:
        return RestCatalog(
            f"restart-{time.monotonic_ns()}",
            uri=srv.uri,
            warehouse=srv.lines["warehouse"],
            credential="etl:etl-pw-2",
            **{"oauth2-server-uri": srv.token_endpoint, "header.X-Iceberg-Access-Delegation": "vended-credentials"},
        )

    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "item": ["apple", "pear", None]})
    first = Served(args)
    try:
        assert first.lines["s3"] == f"http://127.0.0.1:{emu_port}"
        cat = catalog(first)
        cat.create_namespace("shop")
        schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "item", StringType()))
        cat.create_table(("shop", "orders"), schema).append(rows)
    finally:
        first.stop(signal.SIGKILL)
    second = Served(args)
    try:
        assert second.lines["s3"] == f"http://127.0.0.1:{emu_port}"
        got = catalog(second).load_table(("shop", "orders")).scan().to_arrow().sort_by("id")
        assert got.column("id").to_pylist() == [1, 2, 3] and got.column("item").to_pylist() == ["apple", "pear", None]
    finally:
        second.stop()
