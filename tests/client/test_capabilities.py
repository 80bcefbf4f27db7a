"""Polaris's ways, met by clear errors: ``invalid_scope`` names the scope expected; remote signing a
catalog lacks is a ``CapabilityError`` naming its ``/v1/config`` answer.

Polaris cannot run here (only its libraries are on Maven Central), so a small loopback server replays
what Polaris 1.4.1 answered on these machines (``tests/recordings.py``, from ../shared/notes): its token
endpoint (``/api/catalog/v1/oauth/tokens``) refuses every scope but ``PRINCIPAL_ROLE:ALL`` with
``invalid_scope``, and a load asking for remote signing answers 400 ``IllegalArgumentException``
"Unsupported access delegation mode". A generic OIDC issuer publishing ``scopes_supported`` covers the
discovery hint. ``polaris_like`` is shared with the Spark tests (``test_capabilities_spark.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

import lakesession
from lakesession._wire.sockets import bind
from lakesession.errors import CapabilityError, IdentityError, ScopeError
from lakesession.identity import ClientCredentials
from lakesession.reference.serving import BackgroundServer
from tests.recordings import POLARIS_INVALID_SCOPE, POLARIS_UNSUPPORTED_DELEGATION

SECRET = "polaris-secret-0123"
POLARIS_SCOPE = "PRINCIPAL_ROLE:ALL"
INVALID_SCOPE = POLARIS_INVALID_SCOPE.body


def polaris_like(base: str) -> FastAPI:
    """Polaris's token endpoint, its /v1/config (no signing endpoints) and its 400 for remote signing."""
    app = FastAPI()

    @app.post("/api/catalog/v1/oauth/tokens")
    async def token(request: Request) -> JSONResponse:
        form = parse_qs((await request.body()).decode())  # form-encoded, as OAuth clients send it
        if form.get("scope") != [POLARIS_SCOPE]:
            return JSONResponse(INVALID_SCOPE, status_code=400)
        return JSONResponse({"access_token": "polaris-token", "token_type": "bearer", "expires_in": 3600})

    @app.get("/api/catalog/v1/config")
    async def config() -> dict[str, object]:
        return {
            "defaults": {"default-base-location": "s3://polaris/cat"},
            "overrides": {"prefix": "cat"},
            "endpoints": [
                "GET /v1/{prefix}/namespaces",
                "GET /v1/{prefix}/namespaces/{namespace}/tables",
                "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
            ],
        }

    @app.get("/api/catalog/v1/cat/namespaces/{ns}/tables/{table}")
    async def load(ns: str, table: str, request: Request) -> JSONResponse:
        mode = request.headers.get("x-iceberg-access-delegation", "")
        assert mode == "remote-signing", mode
        recorded = POLARIS_UNSUPPORTED_DELEGATION
        return JSONResponse(recorded.body, status_code=recorded.status)

    return app


def oidc_issuer(base: str) -> FastAPI:
    """An OIDC issuer at ``/realms/data`` listing its scopes, whose token endpoint refuses ``catalog``."""
    app = FastAPI()
    issuer = f"{base}/realms/data"

    @app.get("/realms/data/.well-known/openid-configuration")
    async def discovery() -> dict[str, object]:
        return {
            "issuer": issuer,
            "token_endpoint": f"{issuer}/protocol/openid-connect/token",
            "scopes_supported": ["openid", "lakehouse"],
        }

    @app.post("/realms/data/protocol/openid-connect/token")
    async def token() -> JSONResponse:
        return JSONResponse(INVALID_SCOPE, status_code=400)

    return app


def _serve(make: object) -> Iterator[str]:
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = BackgroundServer(make(base), sock, "test-capabilities")  # type: ignore[operator]
    server.start()
    yield base
    server.stop()


@pytest.fixture(scope="module")
def polaris() -> Iterator[str]:
    yield from _serve(polaris_like)


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    yield from _serve(oidc_issuer)


def test_polaris_invalid_scope_names_the_scope_it_expects(polaris: str) -> None:
    url = f"{polaris}/api/catalog/v1/oauth/tokens"
    source = ClientCredentials(url, "root", SECRET, scope="catalog")
    with pytest.raises(ScopeError) as caught:
        source.token()
    err = caught.value
    message = str(err)
    assert isinstance(err, IdentityError) and err.sent == "catalog" and err.expected == [POLARIS_SCOPE]
    assert "refused the scope 'catalog'" in message and "invalid_scope" in message
    assert "Apache Polaris" in message and "scope='PRINCIPAL_ROLE:ALL'" in message
    assert SECRET not in message
    # the hint is right: with that scope the same endpoint hands out a token
    assert ClientCredentials(url, "root", SECRET, scope=POLARIS_SCOPE).token() == "polaris-token"


def test_invalid_scope_names_the_issuers_scopes_supported(issuer: str) -> None:
    url = f"{issuer}/realms/data/protocol/openid-connect/token"
    with pytest.raises(ScopeError) as caught:
        ClientCredentials(url, "lakesession", SECRET, scope="catalog").token()
    message = str(caught.value)
    assert caught.value.expected == ["openid", "lakehouse"]
    assert f"discovery ({issuer}/realms/data) lists scopes_supported: openid, lakehouse" in message
    assert "refused the scope 'catalog'" in message and "connect(..., scope='openid')" in message


def test_remote_signing_refused_by_a_polaris_like_catalog_is_a_capability_error(polaris: str) -> None:
    with lakesession.connect(
        uri=f"{polaris}/api/catalog", token="polaris-token", warehouse="cat", catalog_name="polaris"
    ) as session:
        with pytest.raises(CapabilityError) as caught:
            session.table("sales.orders", access="remote-signing")
        with pytest.raises(CapabilityError) as no_grants:
            session.grants(strict=True)
        assert session.grants()["securable"].tolist() == ["unknown"]  # the lenient default stays
    assert no_grants.value.capability == "grants" and no_grants.value.status == 404
    assert "offers no grants endpoint" in str(no_grants.value) and "its /v1/config lists 3 endpoints" in str(
        no_grants.value
    )
    err = caught.value
    message = str(err)
    assert err.capability == "remote signing" and err.status == 400 and err.config["prefix"] == "cat"
    assert "does not offer remote signing" in message and "Unsupported access delegation mode" in message
    assert "its /v1/config lists 3 endpoints (no …/credentials)" in message
    assert "access='vended-credentials'" in message and len(message.splitlines()) == 1
    assert isinstance(err.__cause__, Exception)  # pyiceberg's BadRequestError, kept
