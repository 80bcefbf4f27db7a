"""Fast checks of the ADLS / GCS plumbing: Iceberg keys, expiry, secrets, gateway rewrites, serve config."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lakesession._wire.cloudkeys import expiry_seconds, holds_credential, refresh_endpoint
from lakesession.credentials import is_secret_key, public_config
from lakesession.gateway._credcache import earliest_expiry
from lakesession.gateway._rewrite import credentials_from_table, rewrite_table_config, signing_unsupported
from lakesession.reference.cloudvending import AdlsSettings, parse_abfs
from lakesession.reference.gcsvending import GcsSettings, LocalTokenSource
from lakesession.reference.serveconfig import ConfigError, adls_settings, gcs_settings, resolve

HOST = "acct.dfs.core.windows.net"
NOW_MS = int(time.time() * 1000)
ADLS_CFG = {
    f"adls.sas-token.{HOST}": "sv=2026&sig=SECRETSIG",
    f"adls.sas-token-expires-at-ms.{HOST}": str(NOW_MS + 60_000),
    f"adls.connection-string.{HOST}": "DefaultEndpointsProtocol=https;AccountKey=KEY==",
}
GCS_CFG = {"gcs.oauth2.token": "ya29.SECRET", "gcs.oauth2.token-expires-at": str(NOW_MS + 30_000)}


def test_expiry_and_secrets_of_adls_and_gcs_keys() -> None:
    assert expiry_seconds(ADLS_CFG) == pytest.approx((NOW_MS + 60_000) / 1000)
    assert expiry_seconds(GCS_CFG) == pytest.approx((NOW_MS + 30_000) / 1000)
    assert expiry_seconds({**ADLS_CFG, **GCS_CFG}) == pytest.approx((NOW_MS + 30_000) / 1000)  # the earliest
    assert holds_credential(ADLS_CFG) and holds_credential(GCS_CFG) and not holds_credential({"gcs.project-id": "p"})
    public = public_config({**ADLS_CFG, **GCS_CFG, "adls.refresh-credentials-endpoint": "v1/x/credentials"})
    assert set(public) == {
        f"adls.sas-token-expires-at-ms.{HOST}",
        "gcs.oauth2.token-expires-at",
        "adls.refresh-credentials-endpoint",
    }  # SAS, token and connection string (may hold an account key) are secrets
    assert is_secret_key(f"adls.connection-string.{HOST}") and not is_secret_key("gcs.oauth2.token-expires-at")
    assert refresh_endpoint({"gcs.oauth2.refresh-credentials-endpoint": "v1/e"}) == "v1/e"


def test_gateway_cache_expiry_injection_and_reload_for_cloud_credentials() -> None:
    load = {"metadata": {"location": f"abfss://lake@{HOST}/wh/t"}, "config": dict(ADLS_CFG)}
    body = json.dumps(load).encode()
    assert earliest_expiry(body) == pytest.approx((NOW_MS + 60_000) / 1000)  # the cache would refresh it
    out = json.loads(rewrite_table_config(body, "http://up", "http://gw", None, "http://gw/v1/p/t/credentials"))
    assert out["config"]["adls.refresh-credentials-endpoint"] == "http://gw/v1/p/t/credentials"  # Iceberg's ADLS key
    assert out["config"]["client.refresh-credentials-endpoint"] == "http://gw/v1/p/t/credentials"
    assert "gcs.oauth2.refresh-credentials-endpoint" not in out["config"]
    (cred,) = json.loads(credentials_from_table(body))["storage-credentials"]
    assert cred["prefix"] == f"abfss://lake@{HOST}/wh/t" and cred["config"][f"adls.sas-token.{HOST}"]
    gcs = json.dumps({"metadata": {"location": "gs://b/wh/t"}, "config": GCS_CFG}).encode()
    assert earliest_expiry(gcs) == pytest.approx((NOW_MS + 30_000) / 1000)
    assert (
        "S3-only" in (signing_unsupported(gcs) or "")
        and signing_unsupported(b'{"metadata":{"location":"s3://b/t"}}') is None
    )


def test_abfs_locations_and_settings_never_show_the_key() -> None:
    assert parse_abfs(f"abfss://lake@{HOST}/wh/ns/t/") == ("lake", HOST, "wh/ns/t")
    s = AdlsSettings("acct", "S3CR3TKEY==", endpoint="http://127.0.0.1:1/acct")
    assert "S3CR3TKEY" not in repr(s)
    with pytest.raises(ValueError, match="sas_scope"):
        AdlsSettings("acct", "k", sas_scope="account")
    assert "SECRET" not in repr(GcsSettings(token_source=LocalTokenSource()))


def test_serve_config_sections_and_their_mistakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        f"warehouse: abfss://lake@{HOST}/wh\nadls: {{account_name: acct, sas_scope: container}}\ncredential_ttl: 900\n"
    )
    kwargs = resolve(cfg, environ={}).start_kwargs
    adls = kwargs["adls_config"]
    monkeypatch.delenv("AZURE_STORAGE_KEY", raising=False)
    with pytest.raises(ConfigError, match="AZURE_STORAGE_KEY"):
        adls_settings(adls, 900)
    monkeypatch.setenv("AZURE_STORAGE_KEY", "a2V5")
    settings = adls_settings(adls, 900)
    assert settings.sas_scope == "container" and settings.credential_ttl == 900 and settings.account_key == "a2V5"
    cfg.write_text("warehouse: gs://b/wh\ngcs: {project_id: p, token_source: local}\n")
    with pytest.raises(ConfigError, match="emulator"):
        gcs_settings(resolve(cfg, environ={}).start_kwargs["gcs_config"], 60)
    cfg.write_text("warehouse: gs://b/wh\ngcs: {project_id: p, token: nope}\n")
    with pytest.raises(ConfigError, match="token"):
        resolve(cfg, environ={})


def test_a_cloud_warehouse_without_its_settings_is_refused_before_serving() -> None:
    from lakesession.reference import start

    with pytest.raises(ValueError, match="adls=AdlsSettings"):
        start(f"abfss://lake@{HOST}/wh")


def test_serve_prints_what_it_vends_for_cloud_warehouses() -> None:
    from types import SimpleNamespace

    from lakesession.reference.servecmd import _vending_line

    def handle(warehouse: str, **clouds: object) -> SimpleNamespace:
        base: dict[str, object] = {"s3": None, "adls": None, "gcs": None, **clouds}
        return SimpleNamespace(settings=SimpleNamespace(warehouse=warehouse, **base))

    adls = AdlsSettings("acct", "S3CR3TKEY==", sas_scope="container", credential_ttl=900)
    line = _vending_line(handle(f"abfss://lake@{HOST}/wh", adls=adls)) or ""
    assert "ADLS SAS" in line and "container (sr=c)" in line and "900 s" in line and "S3CR3TKEY" not in line
    line = _vending_line(handle("gs://b/wh", gcs=GcsSettings(token_source=LocalTokenSource(), credential_ttl=60))) or ""
    assert "GCS OAuth tokens from LocalTokenSource" in line and "S3 only" in line
    assert _vending_line(handle("file:///tmp/wh")) is None
