"""`lakesession.connect()`: configuration sources, identities, grants and audit views — no Spark needed."""

from __future__ import annotations

import logging
import threading

import pytest

import lakesession
from lakesession.config import ConfigError

from .conftest import SECRETS


def who(session) -> str:  # type: ignore[no-untyped-def]
    session.identity.token()  # log in (client credentials fetch lazily)
    return session.identity.describe()["principal"]


def test_connect_with_client_credentials_shows_grants_and_identity(catalog) -> None:  # type: ignore[no-untyped-def]
    s = lakesession.connect(
        uri=catalog.uri,
        credential=f"alice:{SECRETS['alice']}",
        token_url=f"{catalog.issuer_uri}/token",
        warehouse="lakesession",
    )
    g = s.grants()
    row = g[g["securable"] == "namespace sales"].iloc[0]
    assert "TABLE_READ_DATA" in row["privileges"] and row["roles"] == "analysts"
    who = s.identity.describe()
    assert who["principal"] == "alice" and who["issuer"] == catalog.issuer_uri and who["expires_at"] > 0
    assert list(s.audit().columns) == ["time", "action", "object", "via_chain", "decision", "credentials_expire_at"]
    text = repr(s) + repr(s.identity) + str(who)
    assert SECRETS["alice"] not in text and s.identity.token() not in text
    s.close()


def test_grants_unknown_without_a_grants_endpoint(catalog) -> None:  # type: ignore[no-untyped-def]
    s = lakesession.connect(uri=catalog.uri + "/nothing-here", token=catalog.admin.token_for("alice"))
    assert s.grants().to_dict("records") == [
        {"securable": "unknown", "privileges": "unknown", "granted": "unknown", "roles": "unknown"}
    ]


def test_named_catalog_from_config_file_and_pyiceberg_yaml(catalog, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"default: ref\ncatalogs:\n  ref:\n    uri: {catalog.uri}\n    warehouse: lakesession\n"
        f"    credential: alice:{SECRETS['alice']}\n    token_url: {catalog.issuer_uri}/token\n"
    )
    monkeypatch.setenv("LAKESESSION_CONFIG", str(cfg))
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    (tmp_path / ".pyiceberg.yaml").write_text(
        f"catalog:\n  viaiceberg:\n    uri: {catalog.uri}\n    credential: bob:{SECRETS['bob']}\n"
        f"    oauth2-server-uri: {catalog.issuer_uri}/token\n    warehouse: lakesession\n"
    )
    assert who(lakesession.connect("ref")) == "alice"
    assert lakesession.connect().uri == catalog.uri  # the config's default catalog, not the embedded one
    assert who(lakesession.connect("viaiceberg")) == "bob"
    monkeypatch.setenv("LAKESESSION_CREDENTIAL", f"bob:{SECRETS['bob']}")  # environment beats the file
    assert who(lakesession.connect("ref")) == "bob"
    with pytest.raises(ConfigError, match="no catalog named 'nope'"):
        lakesession.connect("nope")


def test_device_login_through_connect(catalog) -> None:  # type: ignore[no-untyped-def]
    prompts = []

    def approve(prompt) -> None:  # type: ignore[no-untyped-def]
        prompts.append(prompt)
        threading.Timer(0.2, catalog.admin.approve_device, args=(prompt.user_code, "alice")).start()

    s = lakesession.connect(uri=catalog.uri, issuer=catalog.issuer_uri, client_id="lakesession-cli", on_prompt=approve)
    assert prompts and prompts[0].verification_uri.startswith(catalog.issuer_uri)
    assert s.identity.describe()["principal"] == "alice"
    assert "namespace sales" in set(s.grants()["securable"])


def test_no_secret_in_debug_logs_or_errors(catalog, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    s = lakesession.connect(
        uri=catalog.uri, credential=f"alice:{SECRETS['alice']}", token_url=f"{catalog.issuer_uri}/token"
    )
    token = s.identity.token()
    s.grants()
    with pytest.raises(Exception) as err:
        lakesession.connect(
            uri=catalog.uri, credential="alice:wrong-secret", token_url=f"{catalog.issuer_uri}/token"
        ).identity.token()
    for text in (caplog.text, str(err.value), repr(err.value)):
        assert SECRETS["alice"] not in text and token not in text and "wrong-secret" not in text
