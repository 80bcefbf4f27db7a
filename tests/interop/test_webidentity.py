"""A catalog with no standing storage key (``s3.web_identity``) against a real STS that checks web identities:
SeaweedFS, whose IAM trusts the catalog's embedded issuer as an OIDC provider (it fetches the discovery
document and JWKS from the catalog over loopback) on a role that nothing else may assume.

Attacks first: any token that is not the catalog's own (a user's access token from the same issuer, an
expired one, one for another subject, one from another issuer, one forged with another key) is refused by
SeaweedFS itself, so the keyless catalog cannot be impersonated; the catalog's tokens and its own session
never reach clients, logs or the audit log. Then the catalog's own session is refreshed ahead of expiry
(time moved on an injected clock, against the real STS), survives a brief STS outage while it is still
valid, and ``lakesession serve --config`` runs with no key anywhere (decoy keys in its environment).
The policy scoping of vended credentials is tests/interop/test_seaweedfs_store.py, run through both modes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError
from joserfc import jwt
from pyiceberg.catalog.rest import RestCatalog

from lakesession.reference import ReferenceCatalog, start
from lakesession.reference.errors import ServiceUnavailable
from lakesession.reference.vending import S3Settings
from lakesession.reference.webidentity import CatalogIdentity, WebIdentity
from tests._seaweedfs import WEB_AUDIENCE, WEB_ROLE_ARN, WEB_SUBJECT, SeaweedFS, seaweedfs
from tests._serve import Served
from tests.factories import ROWS, SCHEMA, free_port, make_catalog, shop_policy

# own_jvm: its catalog wrote with an AccessDenied session only after the whole suite had run before it
# (passes alone; not yet understood — see the closing note of session 6)
pytestmark = [pytest.mark.slow, pytest.mark.own_jvm]

P = "/v1/lakesession"
POLICY = shop_policy("wi")
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


class Clock:
    """Real time plus an offset the test moves (the catalog's session expiry comes from the real STS)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture(scope="module")
def ports() -> tuple[int, int]:
    """The in-process catalog's port and the served one's: SeaweedFS's IAM names both issuers before it starts."""
    web = free_port()
    served = free_port()
    while served == web:
        served = free_port()
    return web, served


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, ports: tuple[int, int]) -> Iterator[SeaweedFS]:
    issuers = [f"http://127.0.0.1:{p}/oidc" for p in ports]
    with seaweedfs(tmp_path_factory.mktemp("seaweedfs-wi"), oidc_issuer=issuers) as sw:
        yield sw


def _settings(store: SeaweedFS) -> S3Settings:
    return S3Settings(
        role_arn=WEB_ROLE_ARN,
        endpoint=store.endpoint,
        path_style=True,
        credential_ttl=900,  # SeaweedFS's minimum
        web_identity=WebIdentity(audience=WEB_AUDIENCE, subject=WEB_SUBJECT, session_duration=900),
    )


@pytest.fixture(scope="module")
def cat(
    store: SeaweedFS, ports: tuple[int, int], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReferenceCatalog]:
    with make_catalog(
        POLICY,
        warehouse=f"s3://{store.bucket}/wh-wi",
        s3=_settings(store),
        port=ports[0],
        data_dir=tmp_path_factory.mktemp("wicat"),
    ) as handle:
        etl = _client(handle.uri, handle.issuer_uri, "etl", "etl-secret-wi")
        etl.create_namespace("shop")
        etl.create_table(("shop", "orders"), SCHEMA).append(ROWS)
        yield handle


def _identity(cat: ReferenceCatalog) -> CatalogIdentity:
    identity = cat.services.vendor.identity
    assert identity is not None
    return identity


def _client(uri: str, issuer: str, who: str, secret: str) -> RestCatalog:
    return RestCatalog(
        f"wi-{who}-{time.monotonic_ns()}",
        uri=uri,
        warehouse="lakesession",
        credential=f"{who}:{secret}",
        **{"oauth2-server-uri": f"{issuer}/token", "header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )


def _assume(store: SeaweedFS, token: str) -> dict[str, Any]:
    """What an attacker holding ``token`` would do: exchange it at the store's STS for the vending role."""
    sts = boto3.client(
        "sts",
        endpoint_url=store.endpoint,
        region_name="us-east-1",
        config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}),
    )
    resp = sts.assume_role_with_web_identity(
        RoleArn=WEB_ROLE_ARN, RoleSessionName="attacker", WebIdentityToken=token, DurationSeconds=900
    )
    return dict(resp["Credentials"])


def _refused(store: SeaweedFS, token: str) -> str:
    with pytest.raises(ClientError) as err:
        _assume(store, token)
    return f"{err.value.response['Error']['Code']}: {err.value.response['Error'].get('Message', '')}"


def _s3(store: SeaweedFS, creds: Any) -> Any:
    access, secret, token = (
        (creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])
        if isinstance(creds, dict)
        else (creds.access_key, creds.secret_key, creds.token)
    )
    return boto3.client(
        "s3",
        endpoint_url=store.endpoint,
        region_name="us-east-1",
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def _user_token(cat: ReferenceCatalog, who: str, secret: str) -> str:
    r = httpx.post(
        f"{cat.issuer_uri}/token", data={"grant_type": "client_credentials", "scope": "catalog"}, auth=(who, secret)
    )
    assert r.status_code == 200, r.text
    return str(r.json()["access_token"])


def test_store_accepts_only_the_catalogs_own_tokens(cat: ReferenceCatalog, store: SeaweedFS) -> None:
    issuer = cat.app.state.issuer
    # control: the catalog's own token opens the vending role (whole-bucket reach: what a forgery would gain)
    own = _assume(store, issuer.workload_token(WEB_SUBJECT, WEB_AUDIENCE, 300))
    assert _s3(store, own).list_objects_v2(Bucket=store.bucket, Prefix="wh-wi/")["KeyCount"] > 0

    # a user's real access token from the same issuer: valid at the catalog, refused by the store (audience)
    user = _user_token(cat, "reader", "reader-secret-wi")
    assert httpx.get(f"{cat.uri}/v1/config", headers={"Authorization": f"Bearer {user}"}).status_code == 200
    # (SeaweedFS 4.48 lets it past its provider's client id check; the role's oidc:aud/oidc:sub condition refuses)
    assert "trust policy" in _refused(store, user).lower()
    # a principal named like the catalog's subject would carry its `sub`: the catalog refuses to create one
    r = httpx.post(
        f"{cat.uri}/management/v1/principals",
        json={"name": WEB_SUBJECT, "type": "service", "client_secret": "x" * 24},
        headers={"Authorization": f"Bearer {cat.admin.token_for('admin')}"},
    )
    assert r.status_code == 400 and "reserved" in r.json()["error"]["message"], r.text
    # and the issuer will not mint one for the store's audience (token exchange), for users or services
    etl = _user_token(cat, "etl", "etl-secret-wi")
    r = httpx.post(
        f"{cat.issuer_uri}/token",
        data={
            "grant_type": EXCHANGE,
            "subject_token": etl,
            "subject_token_type": ACCESS_TOKEN,
            "audience": WEB_AUDIENCE,
        },
        auth=("etl", "etl-secret-wi"),
    )
    assert r.status_code == 400 and r.json()["error"] == "invalid_target", r.text

    # the catalog's token, expired
    assert "expired" in _refused(store, issuer.workload_token(WEB_SUBJECT, WEB_AUDIENCE, -120)).lower()
    # right issuer and audience, another subject (e.g. a principal's name): the role's trust policy refuses
    assert "trust policy" in _refused(store, issuer.workload_token("reader", WEB_AUDIENCE, 300)).lower()

    # another issuer (another catalog: its own key and URL), and a forgery of ours signed with its key
    with start() as other:
        foreign = other.app.state.issuer
        # (its `iss` names no provider: the trust policy's Federated principal does not match)
        assert "trust policy" in _refused(store, foreign.workload_token(WEB_SUBJECT, WEB_AUDIENCE, 300)).lower()
        now = int(time.time())
        claims = {"iss": issuer.issuer_url, "sub": WEB_SUBJECT, "aud": WEB_AUDIENCE, "iat": now, "exp": now + 300}
        for kid in (issuer.kid, foreign.kid):  # our key id (signature fails) or the foreign one (unknown key)
            forged = jwt.encode({"alg": foreign.alg, "kid": kid, "typ": "JWT"}, claims, foreign.key)
            reason = _refused(store, forged).lower()
            assert ("signature is invalid" if kid == issuer.kid else "not found in jwks") in reason, reason


def test_tokens_and_own_session_never_reach_clients_logs_or_audit(
    cat: ReferenceCatalog, store: SeaweedFS, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = _identity(cat)
    minted: list[str] = []
    mint = identity._mint

    def recording(subject: str, audience: str, ttl: int) -> str:
        minted.append(mint(subject, audience, ttl))
        return minted[-1]

    monkeypatch.setattr(identity, "_mint", recording)
    caplog.set_level(logging.DEBUG)  # botocore's DEBUG logs request bodies: the token is in one
    monkeypatch.setattr(identity, "_session", None)  # a new session of its own, and new vended credentials
    cat.services.vendor.invalidate()
    reader = cat.admin.token_for("reader")
    headers = {"Authorization": f"Bearer {reader}", "X-Iceberg-Access-Delegation": "vended-credentials"}
    bodies = [
        httpx.get(f"{cat.uri}/v1/config?warehouse=lakesession", headers=headers),
        httpx.get(f"{cat.uri}{P}/namespaces/shop/tables/orders", headers=headers),
        httpx.get(f"{cat.uri}{P}/namespaces/shop/tables/orders/credentials", headers=headers),
    ]
    assert all(r.status_code == 200 for r in bodies), [r.text for r in bodies]
    vended = bodies[2].json()["storage-credentials"][0]["config"]
    own = identity.credentials()
    assert len(minted) >= 2  # its own session and the vended credential were both exchanged just now
    assert vended["s3.access-key-id"] != own.access_key
    secrets = [*minted, own.secret_key, own.token]
    seen = "\n".join(r.text for r in bodies)
    logs = "\n".join(rec.getMessage() for rec in caplog.records)
    audit = json.dumps([vars(a) for a in cat.admin.audit(limit=200)], default=str)
    assert any("AssumeRoleWithWebIdentity" in rec.getMessage() for rec in caplog.records)  # the log was on
    for secret in secrets:
        assert secret not in seen and secret not in logs and secret not in audit
    assert "WebIdentityToken=***" in logs or "'WebIdentityToken': '***'" in logs
    assert minted[0] not in repr(identity) + repr(cat.settings.s3) + repr(cat)


def test_own_session_refreshes_ahead_of_expiry(cat: ReferenceCatalog, store: SeaweedFS) -> None:
    identity = _identity(cat)
    clock = Clock()
    identity.clock = clock
    identity._session = None
    first = identity.credentials()
    refreshes, expires_at = identity.refreshes, identity._session.expires_at  # type: ignore[union-attr]
    clock.offset = expires_at - time.time() - identity.margin - 30  # just before the refresh point
    assert identity.credentials() is first and identity.refreshes == refreshes
    clock.offset += 60  # inside the margin: one refresh however many ask at once
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(identity.credentials())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert identity.refreshes == refreshes + 1 and len({c.access_key for c in got}) == 1
    second = got[0]
    assert second.access_key != first.access_key
    _s3(store, second).head_bucket(Bucket=store.bucket)  # the new session works at the store

    # the catalog works on the refreshed session: metadata writes (a commit) and remote signing
    etl = _client(cat.uri, cat.issuer_uri, "etl", "etl-secret-wi")
    etl.load_table(("shop", "orders")).append(ROWS)
    reader = _client(cat.uri, cat.issuer_uri, "reader", "reader-secret-wi")
    assert len(reader.load_table(("shop", "orders")).scan().to_arrow()) == 4
    signed = _sign_and_get(cat, store)
    assert signed.status_code == 200 and signed.content[:4] == b"PAR1"

    # STS unreachable: the current session serves on while it is valid, then a clean 503 (no token in it)
    identity._sts = boto3.client(
        "sts",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        region_name="us-east-1",
        config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}),
    )
    expires_at = identity._session.expires_at  # type: ignore[union-attr]
    clock.offset = expires_at - time.time() - identity.margin + 10
    assert identity.credentials() is second
    clock.offset = expires_at - time.time() - 30
    with pytest.raises(ServiceUnavailable):
        identity.credentials()
    refused = _sign_and_get(cat, store, fetch=False)
    assert refused.status_code == 503 and refused.json()["error"]["type"] == "ServiceUnavailableException"
    identity._sts = None  # STS back
    assert _sign_and_get(cat, store).status_code == 200


def _sign_and_get(cat: ReferenceCatalog, store: SeaweedFS, *, fetch: bool = True) -> httpx.Response:
    """Remote signing (signed with the catalog's own session) of a GET of one of the table's data files."""
    admin = boto3.client(
        "s3",
        endpoint_url=store.endpoint,
        region_name="us-east-1",
        aws_access_key_id=store.access_key,
        aws_secret_access_key=store.secret_key,
        config=Config(s3={"addressing_style": "path"}),
    )
    key = admin.list_objects_v2(Bucket=store.bucket, Prefix="wh-wi/shop/orders/data/")["Contents"][0]["Key"]
    uri = f"{store.endpoint}/{store.bucket}/{key}"
    body = {"region": "us-east-1", "uri": uri, "method": "GET", "headers": {}}
    auth = {"Authorization": f"Bearer {cat.admin.token_for('reader')}"}
    r = httpx.post(f"{cat.uri}{P}/namespaces/shop/tables/orders/sign", json=body, headers=auth, timeout=60)
    if not fetch or r.status_code != 200:
        return r
    headers = {k: v[0] for k, v in r.json()["headers"].items()}
    return httpx.get(r.json()["uri"], headers=headers, timeout=30)


def test_serve_runs_with_no_storage_key(store: SeaweedFS, ports: tuple[int, int], tmp_path: Path) -> None:
    """``lakesession serve --config``: no key in the file; decoy keys in the environment must stay unused."""
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"""\
port: {ports[1]}
warehouse: s3://{store.bucket}/wh-served
data_dir: data
credential_ttl: 900
s3:
  role_arn: {WEB_ROLE_ARN}
  endpoint: {store.endpoint}
  web_identity: {{audience: {WEB_AUDIENCE}, subject: {WEB_SUBJECT}, session_duration: 900}}
bootstrap:
  principals: [{{name: etl, type: service, client_id: etl, client_secret: etl-secret-served}}]
  roles: [{{name: eng, members: [etl]}}]
  grants: [{{role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}}]
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID="DECOYKEYDECOYKEYDECO",  # if used, SeaweedFS refuses them: the test would fail
        AWS_SECRET_ACCESS_KEY="decoy-secret-not-a-real-key",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    with Served(["--config", str(config)], env=env) as served:
        mode = served.lines["storage credentials"]
        assert mode.startswith("web identity (no storage key)") and WEB_ROLE_ARN in mode, mode
        etl = _client(served.uri, served.lines["issuer"], "etl", "etl-secret-served")
        etl.create_namespace("shop")
        table = etl.create_table(("shop", "orders"), SCHEMA)
        table.append(ROWS)
        assert sorted(table.scan().to_arrow().column("item").to_pylist()) == ["apple", "pear"]
        assert table.io.properties["s3.access-key-id"] != env["AWS_ACCESS_KEY_ID"]
