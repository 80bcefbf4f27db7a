"""Authorization code grant with PKCE for first-party web clients (e.g. a JupyterHub's ``GenericOAuthenticator``).

* Clients are Directory principals with a client secret whose redirect URIs the
  operator registered (bootstrap ``redirect_uris``); they are first-party, so
  there is no consent screen: the user signs in and is sent back with a code.
* PKCE is required for every client and only ``S256`` is accepted; a missing or
  wrong ``code_verifier`` is ``invalid_grant`` (RFC 7636 §4.6).
* Codes are single use, stored hashed in ``ls_idp_auth_codes`` (so replicas
  sharing the database agree). Redeeming a code twice revokes the tokens
  issued from it (RFC 6749 §4.1.2): its refresh tokens form one rotation
  family, and its access tokens carry that family as ``sid``, which
  ``CodeIssuer.verify`` refuses once the family is revoked.
* ``openid`` scope adds an ID token (with the request's ``nonce``); ``/userinfo``
  answers for a valid access token, which is how oauthenticator learns the user
  name and notices an expired token.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from authlib.oauth2.rfc6749 import OAuth2Request
from authlib.oauth2.rfc6749.errors import InvalidGrantError, InvalidRequestError
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant
from authlib.oauth2.rfc6749.hooks import hooked
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import AuthorizationCodeMixin, UserInfo
from authlib.oidc.core.grants import OpenIDCode
from sqlalchemy import Column, Engine, Float, MetaData, String, Table, Text, and_, delete, insert, select, update

from ._core import IssuerCore
from ._grants import OAuthServer, User
from ._state import digest
from ._throttle import Throttle


class CodeIssuer(IssuerCore, Protocol):
    """What the code flow needs from the issuer (``CodeIssuer`` satisfies it; no import back)."""

    authcodes: AuthCodeStore
    server: OAuthServer
    throttle: Throttle

    @property
    def issuer_url(self) -> str: ...

    @property
    def kid(self) -> str: ...


logger = logging.getLogger(__name__)

AUTH_CODE_TTL = 120  # seconds (RFC 6749 §4.1.2: short, at most 10 minutes)
REUSE_MEMORY = 3600  # spent codes are kept this long after expiry to recognise a replay
MAX_REDIRECT_URI = 2048

metadata = MetaData()

redirect_uris = Table(
    "ls_idp_redirect_uris",
    metadata,
    Column("client_id", String(255), primary_key=True),
    Column("redirect_uri", String(MAX_REDIRECT_URI), primary_key=True),
)

auth_codes = Table(
    "ls_idp_auth_codes",
    metadata,
    Column("code_hash", String(64), primary_key=True),
    Column("family", String(32), nullable=False),
    Column("client_id", String(255), nullable=False),
    Column("principal", String(255), nullable=False),
    Column("redirect_uri", Text, nullable=True),
    Column("scope", Text, nullable=True),
    Column("nonce", Text, nullable=True),
    Column("code_challenge", String(128), nullable=False),
    Column("code_challenge_method", String(8), nullable=False),
    Column("auth_time", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("used_at", Float, nullable=True),
)


def valid_redirect_uri(uri: str) -> bool:
    """An absolute http(s) URI without fragment (RFC 6749 §3.1.2); plain http only for loopback hosts."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(uri)
    except ValueError:
        return False
    if len(uri) > MAX_REDIRECT_URI or parts.fragment or "#" in uri or not parts.hostname:
        return False
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")


def register_redirect_uris(engine: Engine, client_id: str, uris: Iterable[str]) -> None:
    """Make ``uris`` the exact set of redirect URIs of ``client_id`` (bootstrap calls this; idempotent)."""
    wanted = sorted(set(uris))
    bad = [u for u in wanted if not valid_redirect_uri(u)]
    if bad:
        raise ValueError(f"Invalid redirect URI {bad[0]!r}: an absolute https URI (http only for loopback), no '#'")
    metadata.create_all(engine, tables=[redirect_uris])
    with engine.begin() as conn:
        conn.execute(delete(redirect_uris).where(redirect_uris.c.client_id == client_id))
        if wanted:
            conn.execute(insert(redirect_uris), [{"client_id": client_id, "redirect_uri": u} for u in wanted])


@dataclass(frozen=True)
class AuthCode(AuthorizationCodeMixin):
    """A stored authorization code (never the code itself), as authlib's code model."""

    code_hash: str
    family: str
    client_id: str
    principal: str
    redirect_uri: str | None
    scope: str | None
    nonce: str | None
    code_challenge: str
    code_challenge_method: str
    auth_time: float

    def get_redirect_uri(self) -> str | None:
        return self.redirect_uri

    def get_scope(self) -> str | None:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return int(self.auth_time)

    def get_acr(self) -> str | None:
        return None

    def get_amr(self) -> list[str]:
        return ["pwd"]


class AuthCodeStore:
    """Registered redirect URIs and issued codes, in the issuer's database."""

    def __init__(self, engine: Engine):
        self.engine = engine
        metadata.create_all(engine)

    def redirect_uris(self, client_id: str) -> frozenset[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(redirect_uris.c.redirect_uri).where(redirect_uris.c.client_id == client_id))
            return frozenset(r[0] for r in rows)

    def save(self, code: str, *, client_id: str, principal: str, data: dict[str, Any], scope: str | None) -> None:
        now = time.time()
        with self.engine.begin() as conn:
            conn.execute(delete(auth_codes).where(auth_codes.c.expires_at < now - REUSE_MEMORY))
            conn.execute(
                insert(auth_codes).values(
                    code_hash=digest(code),
                    family=uuid.uuid4().hex,
                    client_id=client_id,
                    principal=principal,
                    redirect_uri=data.get("redirect_uri"),
                    scope=scope,
                    nonce=data.get("nonce"),
                    code_challenge=data["code_challenge"],
                    code_challenge_method=data.get("code_challenge_method") or "S256",
                    auth_time=now,
                    expires_at=now + AUTH_CODE_TTL,
                )
            )

    def lookup(self, code: str) -> tuple[AuthCode, bool, bool] | None:
        """The code's record, whether it was already used, and whether it expired."""
        with self.engine.connect() as conn:
            row = conn.execute(select(auth_codes).where(auth_codes.c.code_hash == digest(code))).first()
        if row is None:
            return None
        record = AuthCode(
            row.code_hash,
            row.family,
            row.client_id,
            row.principal,
            row.redirect_uri,
            row.scope,
            row.nonce,
            row.code_challenge,
            row.code_challenge_method,
            row.auth_time,
        )
        return record, row.used_at is not None, row.expires_at <= time.time()

    def consume(self, record: AuthCode) -> bool:
        """Atomically mark the code used; False if it was used (or expired) meanwhile."""
        now = time.time()
        with self.engine.begin() as conn:
            n = conn.execute(
                update(auth_codes)
                .where(
                    and_(
                        auth_codes.c.code_hash == record.code_hash,
                        auth_codes.c.used_at.is_(None),
                        auth_codes.c.expires_at > now,
                    )
                )
                .values(used_at=now)
            ).rowcount
        return n == 1

    def nonce_seen(self, client_id: str, nonce: str) -> bool:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(auth_codes.c.code_hash).where(
                    and_(auth_codes.c.client_id == client_id, auth_codes.c.nonce == nonce)
                )
            ).first()
        return row is not None


class AuthorizationCode(AuthorizationCodeGrant):
    """RFC 6749 §4.1 for confidential clients; tokens carry the signed-in user, refresh tokens rotate as usual."""

    TOKEN_ENDPOINT_AUTH_METHODS = ("client_secret_basic", "client_secret_post")

    @property
    def issuer(self) -> CodeIssuer:
        return self.server.issuer

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        self.issuer.authcodes.save(
            code,
            client_id=request.client.get_client_id(),
            principal=request.user.name,
            data=request.payload.data,
            scope=request.scope,
        )

    def query_authorization_code(self, code: str, client: Any) -> AuthCode | None:
        found = self.issuer.authcodes.lookup(code)
        if found is None:
            return None
        record, used, expired = found
        if record.client_id != client.get_client_id():
            return None
        if used:
            self._replayed(record)
            return None
        return None if expired else record

    def delete_authorization_code(self, authorization_code: AuthCode) -> None:
        pass  # spent atomically in create_token_response

    def authenticate_user(self, authorization_code: AuthCode) -> User | None:
        principal = self.issuer.directory.get_principal(authorization_code.principal)
        return User(principal.name, sid=authorization_code.family) if principal is not None else None

    def _replayed(self, record: AuthCode) -> None:
        self.issuer.refresh_store.revoke_family(
            record.family, reason="reuse of an authorization code", principal=record.principal
        )

    @hooked
    def create_token_response(self) -> tuple[int, dict[str, Any], Any]:
        # authlib's version logs the token at DEBUG; this one never does
        record: AuthCode = self.request.authorization_code
        if not self.issuer.authcodes.consume(record):
            self._replayed(record)
            raise InvalidGrantError("The authorization code was already used or has expired")
        user = self.authenticate_user(record)
        if user is None:
            raise InvalidGrantError("The code's principal no longer exists")
        self.request.user = user
        token = dict(self.generate_token(user=user, scope=record.get_scope(), include_refresh_token=True))
        self.issuer.refresh_store.save(
            token["refresh_token"],
            principal=user.name,
            client_id=self.client.get_client_id(),
            scope=token.get("scope"),
            ttl=self.issuer.settings.refresh_token_ttl,
            family=record.family,
        )
        logger.info(
            "issued an access token for %r to client %r (authorization_code, with refresh token)",
            user.name,
            self.client.get_client_id(),
        )
        return 200, token, self.TOKEN_RESPONSE_HEADER


class S256Challenge(CodeChallenge):
    """PKCE required for every client, ``S256`` only; a missing or wrong verifier is ``invalid_grant``."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ("S256",)
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def __init__(self) -> None:
        super().__init__(required=True)

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: send 'code_challenge' with 'code_challenge_method=S256'")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("Only 'code_challenge_method=S256' is supported")
        super().validate_code_challenge(grant, redirect_uri)

    def validate_code_verifier(self, grant: Any, result: Any) -> None:
        if not grant.request.form.get("code_verifier"):
            raise InvalidGrantError("Missing 'code_verifier': this code was issued with a PKCE challenge")
        super().validate_code_verifier(grant, result)


class OpenID(OpenIDCode):
    """ID tokens for ``openid`` requests, signed with the issuer's key (``aud`` = the client id)."""

    def __init__(self, issuer: CodeIssuer):
        super().__init__(require_nonce=False)
        self.issuer = issuer

    def exists_nonce(self, nonce: str, request: OAuth2Request) -> bool:
        return self.issuer.authcodes.nonce_seen(request.payload.client_id, nonce)

    def resolve_client_private_key(self, client: Any) -> Any:
        return self.issuer.key

    def get_client_algorithm(self, client: Any) -> str:
        return self.issuer.alg

    def get_encode_header(self, client: Any) -> dict[str, str]:
        return {"alg": self.issuer.alg, "kid": self.issuer.kid, "typ": "JWT"}

    def get_client_claims(self, client: Any) -> dict[str, Any]:
        return {
            "iss": self.issuer.issuer_url,
            "aud": [client.get_client_id()],
            "exp": int(time.time()) + self.issuer.settings.access_token_ttl,
        }

    def generate_user_info(self, user: User, scope: str) -> UserInfo:
        return user_info(user.name)


def user_info(principal: str) -> UserInfo:
    """The OIDC claims of a principal (its name is the only profile the Directory keeps)."""
    return UserInfo(sub=principal, preferred_username=principal, name=principal)


def register(issuer: CodeIssuer) -> None:
    """Add the authorization code grant (PKCE S256 + OpenID) to the issuer's authlib server."""
    issuer.server.register_grant(AuthorizationCode, [S256Challenge(), OpenID(issuer)])
