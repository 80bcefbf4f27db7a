"""``s3.web_identity`` without a store: its configuration (typed, validated before binding, file:line in every
error), and the catalog's side of the trust: its storage tokens are never access tokens to itself, no
principal may bear their subject, and no standing key is picked up from the environment.
(Against SeaweedFS's STS: tests/test_webidentity.py and tests/test_seaweedfs_store.py.)"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from lakesession.reference import bootstrap, start
from lakesession.reference.servecmd import _storage_credentials_mode
from lakesession.reference.serveconfig import ConfigError, resolve, s3_settings
from lakesession.reference.vending import S3Settings
from lakesession.reference.webidentity import WebIdentity

ROLE = "arn:aws:iam::000000000000:role/vend"


def write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "serve.yaml"
    f.write_text(text)
    return f


def _s3(tmp_path: Path, web: str, extra: str = "", environ: dict[str, str] | None = None) -> S3Settings:
    f = write(
        tmp_path, f"warehouse: s3://lake/wh\n{extra}s3:\n  role_arn: {ROLE}\n  endpoint: http://127.0.0.1:9\n{web}"
    )
    kwargs = resolve(f, environ=environ or {}).start_kwargs
    settings: S3Settings = s3_settings(kwargs["s3_config"], 900)
    return settings


def test_web_identity_settings_and_no_key_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "DECOYKEYDECOYKEYDECO")  # what a standing-key catalog would take
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "decoy-secret")
    standing = _s3(tmp_path, "")
    assert standing.web_identity is None and standing.access_key_id == "DECOYKEYDECOYKEYDECO"
    keyless = _s3(tmp_path, "  web_identity: true\n")
    assert keyless.web_identity == WebIdentity() and keyless.access_key_id is None
    assert keyless.secret_access_key is None and keyless.session_token is None
    assert keyless.catalog_file_io().keys().isdisjoint({"s3.access-key-id", "s3.secret-access-key"})
    custom = _s3(
        tmp_path, "  web_identity: {audience: seaweed, subject: cat-1, role_arn: arn:r, session_duration: 900}\n"
    )
    assert custom.web_identity == WebIdentity("seaweed", "cat-1", "arn:r", 900)
    off = _s3(tmp_path, "  web_identity: false\n")
    assert off.web_identity is None
    env = _s3(tmp_path, "", environ={"LAKESESSION_SERVE__S3__WEB_IDENTITY": "true"})
    assert env.web_identity == WebIdentity()
    f = write(tmp_path, f"warehouse: s3://lake/wh\ns3: {{role_arn: {ROLE}}}\n")
    flagged = resolve(f, flags={"s3.web_identity": ("--s3-web-identity", True)}, environ={}).start_kwargs
    assert s3_settings(flagged["s3_config"], 900).web_identity == WebIdentity()
    assert "web_identity" in repr(keyless) and "decoy" not in repr(standing)


def test_web_identity_errors_name_the_line_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _s3(tmp_path, "  web_identity:\n    subjet: cat\n")
    assert f"{tmp_path / 'serve.yaml'}:6: unknown key 'subjet': did you mean 'subject'?" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _s3(tmp_path, "  web_identity: {session_duration: 60}\n")
    assert ":5: s3.web_identity.session_duration" in str(e.value) and "900" in str(e.value)
    with pytest.raises(ConfigError) as e:  # the embedded issuer signs the tokens: an external one cannot
        _s3(tmp_path, "  web_identity: true\n", extra="issuer_url: https://idp.example/realms/x\n")
    assert ":6: s3.web_identity needs the embedded issuer" in str(e.value) and "serve.yaml:2 sets issuer_url" in str(
        e.value
    )
    with pytest.raises(ConfigError) as e:  # tokens for STS must never be access tokens to this catalog
        _s3(tmp_path, "  web_identity: {audience: lakesession}\n")
    assert "is the catalog's own audience" in str(e.value) and "sts.amazonaws.com" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _s3(tmp_path, "  web_identity: {audience: cat}\n", extra="audience: cat\n")
    assert "is the catalog's own audience" in str(e.value)
    with pytest.raises(ValueError, match="no standing storage key"):
        S3Settings(role_arn=ROLE, access_key_id="AKIA", secret_access_key="s", web_identity=WebIdentity())


def test_storage_tokens_are_not_access_tokens_to_the_catalog() -> None:
    """A token the catalog signs for STS, presented to the catalog itself (e.g. lifted off the network)."""
    with start() as cat:
        issuer = cat.app.state.issuer
        token = issuer.workload_token("admin", "sts.amazonaws.com", 300)  # even naming the admin principal
        r = httpx.get(f"{cat.uri}/v1/config", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 401, r.text
        ok = httpx.get(f"{cat.uri}/v1/config", headers={"Authorization": f"Bearer {cat.admin.token_for('admin')}"})
        assert ok.status_code == 200
        with pytest.raises(ValueError, match="own audience"):
            issuer.workload_token("admin", cat.settings.audience, 300)


def test_catalog_refuses_a_principal_named_like_its_storage_identity(tmp_path: Path) -> None:
    s3 = S3Settings(role_arn=ROLE, endpoint="http://127.0.0.1:9", web_identity=WebIdentity(subject="catalog-x"))
    policy = bootstrap.parse("principals: [{name: catalog-x, type: service, client_secret: abcdefghijklmnop}]\n")
    with pytest.raises(ValueError, match="a principal is named 'catalog-x'"):
        start(warehouse="s3://lake/wh", s3=s3, data_dir=tmp_path / "a", bootstrap=policy)
    same = S3Settings(role_arn=ROLE, web_identity=WebIdentity(audience="lakesession"))
    with pytest.raises(ValueError, match="the catalog's own audience"):
        start(warehouse="s3://lake/wh", s3=same, data_dir=tmp_path / "d")
    with pytest.raises(ValueError, match="needs the embedded issuer"):
        start(warehouse="s3://lake/wh", s3=s3, data_dir=tmp_path / "b", issuer_url="http://127.0.0.1:9/idp")
    with start(warehouse="s3://lake/wh", s3=s3, data_dir=tmp_path / "c") as cat:  # nothing reaches STS at start
        assert cat.services.vendor.identity.sts_calls == 0
        with pytest.raises(Exception, match="reserved"):
            cat.admin.create_principal("catalog-x", "service")


def test_serve_printout_names_the_mode() -> None:
    web = S3Settings(role_arn=ROLE, web_identity=WebIdentity())
    handle = SimpleNamespace(settings=SimpleNamespace(s3=web), s3_emulator=None)
    assert _storage_credentials_mode(handle).startswith("web identity (no storage key)")  # type: ignore[union-attr]
    handle.settings.s3 = S3Settings(role_arn=ROLE, access_key_id="AKIASECRETISH", secret_access_key="s3cr3t")
    mode = _storage_credentials_mode(handle) or ""
    assert mode.startswith("standing key") and "AKIASECRETISH" not in mode and "s3cr3t" not in mode
    handle.s3_emulator = object()
    assert "emulator" in (_storage_credentials_mode(handle) or "")
    handle.settings.s3 = None
    assert _storage_credentials_mode(handle) is None
