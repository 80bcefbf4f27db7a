"""The embedded catalog's cheap start: what it defers (pyiceberg, the catalog routers, moto, Alembic) still
works when first needed, and each shortcut equals the long way (head revision, schema template, endpoints)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from lakesession.reference import idempotency, migrations, store
from lakesession.reference.app import implemented_endpoints
from lakesession.reference.routes import config


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["LAKESESSION_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")) if p
    )
    return env


def _schema(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return sorted(
            conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()
        )


def test_head_constant_is_alembics_head() -> None:
    assert migrations.HEAD == migrations.head(), "set migrations.HEAD to the newest revision in versions/"


def test_advertised_endpoints_are_the_mounted_routes() -> None:
    assert list(config.CATALOG_ENDPOINTS) == implemented_endpoints(), "update routes/config.py CATALOG_ENDPOINTS"
    assert config.IDEMPOTENCY_LIFETIME == idempotency.LIFETIME


@pytest.mark.slow  # a fresh interpreter
def test_a_database_at_head_skips_alembic_and_an_older_one_still_migrates(tmp_path: Path) -> None:
    url = store.sqlite_url(tmp_path / "c.db")
    engine = store.make_engine(url)
    assert migrations.at_head(engine)
    engine.dispose()
    # at head: a fresh process opens it without importing Alembic
    code = (
        "import sys\nfrom lakesession.reference import store\n"
        f"store.make_engine({url!r}).dispose()\nprint('alembic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(tmp_path), check=True)
    assert out.stdout.strip() == "False"
    # one revision behind: the fast path is not taken, and the migration runs
    older = store.sqlite_url(tmp_path / "old.db")
    raw = create_engine(older)
    migrations.upgrade(raw, "0004")
    assert not migrations.at_head(raw) and migrations.current(raw) == "0004"
    assert "ls_idempotency" not in {r[0] for r in raw.connect().execute(text("SELECT name FROM sqlite_master"))}
    raw.dispose()
    engine = store.make_engine(older)
    assert migrations.current(engine) == migrations.HEAD
    engine.dispose()
    # no version table at all (an empty file) is not "at head" either
    empty = create_engine(store.sqlite_url(tmp_path / "empty.db"))
    assert not migrations.at_head(empty)
    empty.dispose()


def test_schema_template_equals_a_migrated_database(tmp_path: Path) -> None:
    from lakesession.embedded import _schema_template, _seed_database

    migrated = tmp_path / "migrated.db"
    store.make_engine(store.sqlite_url(migrated)).dispose()
    template = _schema_template(tmp_path)
    assert template.name == f"schema-{migrations.HEAD}.db"
    assert _schema(template) == _schema(migrated)
    assert stat.S_IMODE(template.stat().st_mode) == 0o600
    session = tmp_path / "session"
    session.mkdir()
    _seed_database(tmp_path, session)
    db = session / "catalog.db"
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert _schema(db) == _schema(migrated)
    with sqlite3.connect(db) as conn:
        assert conn.execute(f"SELECT version_num FROM {migrations.VERSION_TABLE}").fetchall() == [(migrations.HEAD,)]
        assert conn.execute("SELECT count(*) FROM ls_principals").fetchone() == (0,)  # no secret in the template
    before = db.read_bytes()
    _seed_database(tmp_path, session)  # an existing database is never replaced
    assert db.read_bytes() == before


CHILD = textwrap.dedent("""
    import json, sys
    from lakesession.embedded import start_embedded_async
    emb, identity = start_embedded_async().result(120)
    deferred = sorted(m for m in ("pyiceberg", "moto", "alembic", "botocore") if m in sys.modules)
    import httpx
    token = identity.token()
    config = httpx.get(emb.uri + "/v1/config", headers={"Authorization": "Bearer " + token}).json()
    after_config = sorted(m for m in ("pyiceberg", "moto") if m in sys.modules)
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog
    cat = RestCatalog("lake", uri=emb.uri, token=token, warehouse=emb.warehouse,
                      **{"header.X-Iceberg-Access-Delegation": "vended-credentials"})
    cat.create_namespace("demo")
    t = cat.create_table("demo.t", schema=pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2, 3]}))
    rows = sorted(cat.load_table("demo.t").scan().to_arrow()["id"].to_pylist())
    print(json.dumps({"deferred": deferred, "after_config": after_config, "endpoints": len(config["endpoints"]),
                      "rows": rows, "location": t.metadata.location}))
""")


@pytest.mark.slow  # a fresh interpreter
def test_embedded_start_defers_pyiceberg_and_moto_until_a_catalog_request(tmp_path: Path) -> None:
    from lakesession.embedded import _schema_template

    (tmp_path / "embedded").mkdir()
    _schema_template(tmp_path / "embedded")  # made (with Alembic) by the installation's first start
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=_env(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["deferred"] == [], "the embedded start imported what it should defer"
    assert result["after_config"] == [], "/v1/config is served without the catalog routers"
    assert result["endpoints"] == len(config.CATALOG_ENDPOINTS)
    assert result["rows"] == [1, 2, 3]  # written and read on the lazily started S3 emulator, vended credentials
    assert result["location"].startswith("s3://lakesession-")
    assert not list((tmp_path / "embedded").glob("session-*")), "the sandbox is removed when the process exits"
    assert (tmp_path / "embedded" / f"schema-{migrations.HEAD}.db").exists()


def test_lazy_emulator_keeps_the_keys_and_role_it_promised() -> None:
    from botocore.exceptions import ClientError

    from lakesession.reference.storage.emulator import Credentials, S3Emulator
    from lakesession.reference.storage.policy import table_session_policy

    emu = S3Emulator(lazy=True).start()
    try:
        promised_key, promised_role = emu.admin_credentials, emu.vending_role_arn
        emu.create_bucket("lazy-bucket")  # before moto: created with the account at first use
        assert promised_role == f"arn:aws:iam::{emu.account_id}:role/lakesession-vending"
        s3 = emu.client("s3")
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["lazy-bucket"]
        assert emu.admin_credentials == promised_key and emu.vending_role_arn == promised_role
        creds = emu.assume(table_session_policy("s3://lazy-bucket/wh/t", write=True))
        scoped = emu.client("s3", creds)
        scoped.put_object(Bucket="lazy-bucket", Key="wh/t/a", Body=b"x")
        try:
            scoped.put_object(Bucket="lazy-bucket", Key="wh/other/a", Body=b"x")
            raise AssertionError("a session policy scoped to wh/t allowed wh/other")
        except ClientError as e:
            assert e.response["Error"]["Code"] == "AccessDenied"
        wrong = emu.client("s3", Credentials(promised_key.access_key_id, "not-the-secret"))
        try:
            wrong.list_buckets()
            raise AssertionError("a wrong secret for the promised key was accepted")
        except ClientError as e:
            assert e.response["Error"]["Code"] == "SignatureDoesNotMatch"
    finally:
        emu.stop(clear=True)
    emu.start()  # a restart after clear: new keys, still working
    try:
        assert emu.admin_credentials != promised_key
        assert emu.client("s3").list_buckets()["Buckets"] == []
    finally:
        emu.stop(clear=True)


def test_a_secret_just_hashed_verifies_without_pbkdf2_and_nothing_else_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from lakesession.reference.directory import Directory

    engine = store.make_engine(store.sqlite_url(tmp_path / "d.db"))
    directory = Directory(engine)
    calls: list[str] = []
    real = hashlib.pbkdf2_hmac

    def counting(*args: Any, **kwargs: Any) -> bytes:
        calls.append("pbkdf2")
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counting)
    directory.create_principal("demo", "user", "demo", "first-secret")
    assert len(calls) == 1  # the hash itself
    assert directory.authenticate_client("demo", "first-secret") is not None
    assert len(calls) == 1  # the login right after: no second PBKDF2
    assert directory.authenticate_client("demo", "guess") is None and len(calls) == 2  # a wrong one still pays
    directory.set_client_secret("demo", "second-secret")
    assert directory.authenticate_client("demo", "first-secret") is None  # the old secret is gone
    assert directory.authenticate_client("demo", "second-secret") is not None
    assert len(calls) == 4  # set (hash) + the refused old secret; the new one verified from the hash just made
    engine.dispose()


def test_warm_loads_what_a_lazy_start_deferred(tmp_path: Path) -> None:
    import httpx

    from lakesession.reference import start
    from lakesession.reference.context import Deferred

    handle = start(warehouse="s3://warm-bucket/wh", s3_emulator=True, data_dir=tmp_path, lazy_catalog=True)
    try:
        deferred = handle.services.__dict__["_catalog"]
        assert isinstance(deferred, Deferred) and not deferred.built
        assert not getattr(handle.app.state, "catalog_mounted", False)
        assert not handle.s3_emulator._bootstrapped
        token = handle.admin.token_for("admin")
        config = httpx.get(f"{handle.uri}/v1/config", headers={"Authorization": f"Bearer {token}"})
        assert config.status_code == 200 and not getattr(handle.app.state, "catalog_mounted", False)
        handle.warm()
        assert deferred.built and handle.app.state.catalog_mounted and handle.s3_emulator._bootstrapped
        listed = httpx.get(
            f"{handle.uri}/v1/{handle.warehouse}/namespaces", headers={"Authorization": f"Bearer {token}"}
        )
        assert listed.status_code == 200 and listed.json()["namespaces"] == []
        s3 = handle.s3_emulator.client("s3")  # the admin keys the catalog was given at start are moto's now
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["warm-bucket"]
    finally:
        handle.stop()
