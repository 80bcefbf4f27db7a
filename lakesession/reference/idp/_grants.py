"""authlib's OAuth 2.0 server machinery, specialised for the embedded issuer.

* ``OAuthServer``: an ``AuthorizationServer`` whose clients are the Directory's
  principals (client_secret_basic / client_secret_post) plus public clients
  (``none``) that may only use the device and refresh grants.
* Grants: client credentials, device code (RFC 8628), refresh token with
  rotation, and token exchange (RFC 8693, which authlib does not implement).
* ``AccessTokenGenerator``: authlib's RFC 9068 JWT generator (``typ: at+jwt``).

The grants override ``create_token_response`` so that no token ever reaches a
log record (authlib's own versions log the issued token at DEBUG).
"""

from __future__ import annotations

import logging
import math
import re
import secrets
import time
from typing import Any

from authlib.common.urls import add_params_to_uri
from authlib.consts import default_json_headers
from authlib.oauth2.rfc6749 import AuthorizationServer, ClientMixin, OAuth2Request
from authlib.oauth2.rfc6749.errors import (
    InvalidGrantError,
    InvalidRequestError,
    InvalidScopeError,
    OAuth2Error,
    UnauthorizedClientError,
)
from authlib.oauth2.rfc6749.grants import BaseGrant, ClientCredentialsGrant, RefreshTokenGrant, TokenEndpointMixin
from authlib.oauth2.rfc6749.util import scope_to_list
from authlib.oauth2.rfc8628 import DeviceAuthorizationEndpoint, DeviceCodeGrant
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from joserfc.jwk import KeySet
from sqlalchemy import and_, select

from .. import store
from ..authz import Privilege, Securable
from ..errors import NotAuthorized
from ._adapter import FormPayload
from ._core import IssuerCore
from ._devices import DeviceCredential

DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
DEFAULT_SCOPE = "catalog"
PUBLIC_GRANTS = frozenset({DEVICE_CODE_GRANT, "refresh_token"})

logger = logging.getLogger(__name__)


class InvalidTargetError(OAuth2Error):
    """RFC 8693 §2.2.2: the requested audience is not one this issuer mints tokens for."""

    error = "invalid_target"


class TemporarilyUnavailableError(OAuth2Error):
    error = "temporarily_unavailable"
    status_code = 503

    def __init__(self, description: str, *, retry_after: float = 60, status_code: int | None = None):
        super().__init__(description=description, status_code=status_code)
        self.retry_after = max(1, math.ceil(retry_after))

    def get_headers(self) -> list[tuple[str, str]]:
        return [*super().get_headers(), ("Retry-After", str(self.retry_after))]


class TooManyRequestsError(TemporarilyUnavailableError):
    """429: this caller's allowance is used up (others are unaffected); ``slow_down`` as in RFC 8628 §3.5."""

    error = "slow_down"
    status_code = 429


class Client(ClientMixin):
    """An OAuth client: a Directory principal's client credentials, or a public (secret-less) client id."""

    def __init__(self, issuer: IssuerCore, client_id: str, *, token_ttl: int | None = None):
        self.issuer = issuer
        self.client_id = client_id
        self.principal: str | None = None  # set once the secret checks out
        self.token_ttl = token_ttl

    def __repr__(self) -> str:
        return f"Client({self.client_id!r})"

    def get_client_id(self) -> str:
        return self.client_id

    def check_client_secret(self, client_secret: str) -> bool:
        principal = self.issuer.directory.authenticate_client(self.client_id, client_secret)
        self.principal = principal.name if principal else None
        return principal is not None

    def is_confidential(self) -> bool:
        """True when the Directory holds a secret for this client id (it must then authenticate)."""
        p = store.principals
        with self.issuer.engine.connect() as conn:
            row = conn.execute(
                select(p.c.name).where(and_(p.c.client_id == self.client_id, p.c.secret_hash.is_not(None)))
            ).first()
        return row is not None

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if method == "none":
            return not self.is_confidential()
        return method in ("client_secret_basic", "client_secret_post")

    def check_grant_type(self, grant_type: str) -> bool:
        return self.principal is not None or grant_type in PUBLIC_GRANTS

    def get_allowed_scope(self, scope: str | None) -> str:
        return scope or DEFAULT_SCOPE  # any scope string is accepted; the catalog authorizes by RBAC

    def check_response_type(self, response_type: str) -> bool:
        """``code`` for confidential clients with registered redirect URIs (``_authcode``)."""
        return (
            response_type == "code"
            and bool(self.issuer.authcodes.redirect_uris(self.client_id))
            and self.is_confidential()
        )

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.issuer.authcodes.redirect_uris(self.client_id)  # exact match only

    def get_default_redirect_uri(self) -> None:
        return None


class User:
    """The token's subject (a principal name) and, after token exchange, the ``act`` chain.

    ``sid`` is the sign-in session (the refresh-token family): its tokens die with it (``EmbeddedIssuer.verify``).
    """

    def __init__(self, name: str, act: dict[str, Any] | None = None, sid: str | None = None):
        self.name = name
        self.act = act
        self.sid = sid

    def get_user_id(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"User({self.name!r})"


class AccessTokenGenerator(JWTBearerTokenGenerator):
    """RFC 9068 access tokens signed by the issuer's key; opaque random refresh tokens."""

    def __init__(self, issuer: IssuerCore):
        super().__init__(
            issuer.settings.embedded_issuer_url,
            alg=issuer.alg,
            refresh_token_generator=lambda **_: secrets.token_urlsafe(32),
            expires_generator=self._ttl,
        )
        self._issuer = issuer
        self._keys = KeySet([issuer.key])

    def _ttl(self, client: Client, grant_type: str) -> int:
        return client.token_ttl if client.token_ttl is not None else self._issuer.settings.access_token_ttl

    def get_jwks(self) -> KeySet:
        return self._keys

    def get_audiences(self, client: Client, user: User | None, scope: str | None) -> str:
        return self._issuer.settings.audience

    def get_extra_claims(self, client: Client, grant_type: str, user: User | None, scope: str | None) -> dict:
        claims: dict[str, Any] = {"act": user.act} if user is not None and user.act else {}
        if user is not None and user.sid:
            claims["sid"] = user.sid
        return claims


class OAuthServer(AuthorizationServer):
    """authlib's authorization server, speaking Starlette through ``_adapter``."""

    def __init__(self, issuer: IssuerCore):
        super().__init__(scopes_supported=None)  # any scope string
        self.issuer = issuer
        self.register_token_generator("default", AccessTokenGenerator(issuer))
        for grant in (ClientCredentials, DeviceCode, RefreshToken, TokenExchange):
            self.register_grant(grant)
        self.register_endpoint(DeviceAuthorization(self))

    def query_client(self, client_id: str) -> Client | None:
        if not client_id or len(client_id) > 255 or not client_id.isprintable():
            return None
        return Client(self.issuer, client_id)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        if "refresh_token" in token:
            family = request.refresh_token.family if request.refresh_token is not None else None
            self.issuer.refresh_store.save(
                token["refresh_token"],
                principal=request.user.name,
                client_id=request.client.get_client_id(),
                scope=token.get("scope"),
                ttl=self.issuer.settings.refresh_token_ttl,
                family=family,
            )

    def create_oauth2_request(self, request: Any) -> OAuth2Request:
        return request  # already adapted by ``_adapter.oauth2_request``

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None

    def handle_response(self, status: int, body: Any, headers: Any) -> tuple[int, Any, Any]:
        return status, body, headers  # the issuer turns it into a Starlette response

    def create_token_response(self, request: Any = None) -> tuple[int, Any, Any]:
        payload: FormPayload = request.payload
        repeated = payload.repeated(allowed=("audience", "resource"))
        if repeated:
            # echo names only when they are plain (RFC 6749 §5.2 restricts error_description's characters)
            names = [n for n in repeated if re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", n)]
            listed = f": {', '.join(names)}" if len(names) == len(repeated) else ""
            return self.handle_error_response(request, InvalidRequestError(f"Parameters must not be repeated{listed}"))
        return super().create_token_response(request)


def _respond(grant: BaseGrant, token: dict[str, Any]) -> tuple[int, dict[str, Any], list]:
    grant.save_token(token)
    logger.info(
        "issued an access token for %r to client %r (%s%s)",
        grant.request.user.name,
        grant.client.get_client_id(),
        grant.GRANT_TYPE,
        ", with refresh token" if "refresh_token" in token else "",
    )
    return 200, token, default_json_headers


class ClientCredentials(ClientCredentialsGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ("client_secret_basic", "client_secret_post")

    def create_token_response(self):
        self.request.user = User(self.client.principal)
        return _respond(
            self,
            self.generate_token(user=self.request.user, scope=self.request.payload.scope, include_refresh_token=False),
        )


class DeviceCode(DeviceCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")

    def query_device_credential(self, device_code: str) -> DeviceCredential | None:
        return self.server.issuer.devices.by_device_code(device_code)

    def query_user_grant(self, user_code: str) -> tuple[User, bool] | None:
        cred = self.server.issuer.devices.by_user_code(user_code)
        if cred is None or cred.approved is None:
            return None
        return User(cred.principal or ""), cred.approved

    def should_slow_down(self, credential: DeviceCredential) -> bool:
        return credential.poll_too_fast()

    def create_token_response(self):
        device_code = self.request.payload.data["device_code"]
        if self.server.issuer.devices.pop(device_code) is None:  # single use, even under concurrent polls
            raise InvalidGrantError("The device code was already redeemed")
        return _respond(
            self,
            self.generate_token(
                user=self.request.user, scope=self.request.credential.get_scope(), include_refresh_token=True
            ),
        )


class RefreshToken(RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str):
        return self.server.issuer.refresh_store.lookup(refresh_token)

    def authenticate_user(self, refresh_token):
        principal = self.server.issuer.directory.get_principal(refresh_token.principal)
        return User(principal.name, sid=refresh_token.family) if principal else None

    def revoke_old_credential(self, refresh_token) -> None:
        pass  # already spent atomically before the new token was minted

    def create_token_response(self):
        record = self.request.refresh_token
        if not self.server.issuer.refresh_store.consume(record):
            raise InvalidGrantError()
        user = self.authenticate_user(record)
        if user is None:
            raise InvalidGrantError("The token's principal no longer exists")
        self.request.user = user
        return _respond(self, self.issue_token(user, record))


class TokenExchange(BaseGrant, TokenEndpointMixin):
    """RFC 8693 delegation: an authenticated client acts for the subject of an access token this issuer minted.

    The new token keeps the subject's ``sub`` and records the client's principal
    as the actor (``act: {"sub": ...}``, nesting any earlier ``act``). Holding
    another principal's token is not enough to become it: exchanging one needs the
    ``TOKEN_EXCHANGE`` privilege on the catalog (one's own token may always be exchanged).
    """

    GRANT_TYPE = TOKEN_EXCHANGE_GRANT
    TOKEN_ENDPOINT_AUTH_METHODS = ("client_secret_basic", "client_secret_post")

    def validate_token_request(self) -> None:
        client = self.authenticate_token_endpoint_client()
        if not client.check_grant_type(self.GRANT_TYPE):
            raise UnauthorizedClientError("The client may not use token exchange")
        self.request.client = client
        data = self.request.payload.data
        subject_token, subject_type = data.get("subject_token"), data.get("subject_token_type")
        if not subject_token or not subject_type:
            raise InvalidRequestError("Missing 'subject_token' or 'subject_token_type'")
        if subject_type not in (ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE):
            raise InvalidRequestError("Unsupported 'subject_token_type': an access token is required")
        if data.get("actor_token"):
            raise InvalidRequestError("'actor_token' is not supported: the authenticated client is the actor")
        if data.get("requested_token_type", ACCESS_TOKEN_TYPE) != ACCESS_TOKEN_TYPE:
            raise InvalidRequestError("Only access tokens can be issued")
        audience = self.server.issuer.settings.audience
        if any(a != audience for a in self.request.payload.datalist.get("audience", [])):
            raise InvalidTargetError("Tokens can only be issued for this catalog's audience")
        try:
            claims = self.server.issuer.verify(subject_token)
        except NotAuthorized:
            raise InvalidGrantError("The subject token is invalid or expired") from None
        granted = claims.get("scope") or DEFAULT_SCOPE
        requested = self.request.payload.scope
        if requested and not set(scope_to_list(granted)).issuperset(scope_to_list(requested)):
            raise InvalidScopeError("The requested scope exceeds the subject token's scope")
        self.request.scope = requested or granted
        directory = self.server.issuer.directory
        if claims["sub"] != client.principal and not directory.is_allowed(
            client.principal, Privilege.TOKEN_EXCHANGE, Securable.catalog()
        ):
            logger.warning("refused token exchange by %r for another principal's token", client.principal)
            raise UnauthorizedClientError(
                "The client may exchange only its own tokens (acting for another principal needs TOKEN_EXCHANGE on catalog)"
            )
        act: dict[str, Any] = {"sub": client.principal}
        if isinstance(claims.get("act"), dict):
            act["act"] = claims["act"]
        self.request.user = User(claims["sub"], act=act)

    def create_token_response(self) -> tuple[int, dict[str, Any], list]:
        token = self.generate_token(user=self.request.user, scope=self.request.scope, include_refresh_token=False)
        token["issued_token_type"] = ACCESS_TOKEN_TYPE
        return _respond(self, token)


class DeviceAuthorization(DeviceAuthorizationEndpoint):
    """RFC 8628 §3.1-3.2: hands out device and user codes; expiry and interval come from the settings."""

    CLIENT_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")

    @property
    def EXPIRES_IN(self) -> int:
        return self.server.issuer.settings.device_code_ttl

    @property
    def INTERVAL(self) -> int:
        return self.server.issuer.settings.device_poll_interval

    def get_verification_uri(self) -> str:
        return self.server.issuer.settings.embedded_issuer_url + "/device"

    def create_endpoint_response(self, request: Any) -> tuple[int, dict[str, Any], list]:
        """authlib's RFC 8628 §3.1-3.2 steps, with the requesting address stored beside the code (quotas)."""
        self.authenticate_client(request)
        self.server.validate_requested_scope(request.payload.scope)
        data = {
            "device_code": self.generate_device_code(),
            "user_code": self.generate_user_code(),
            "verification_uri": self.get_verification_uri(),
            "expires_in": self.EXPIRES_IN,
            "interval": self.INTERVAL,
        }
        data["verification_uri_complete"] = add_params_to_uri(
            data["verification_uri"], [("user_code", data["user_code"])]
        )
        now = time.time()
        cred = DeviceCredential(
            request.client.get_client_id(),
            request.payload.scope or DEFAULT_SCOPE,
            data["user_code"],
            expires_at=now + data["expires_in"],
            interval=data["interval"],
            address=getattr(request, "address", ""),
        )
        refused = self.server.issuer.devices.add(data["device_code"], cred)
        if refused is not None:
            status, wait = refused
            if status == 429:
                raise TooManyRequestsError("Too many pending codes from this address or network", retry_after=wait)
            raise TemporarilyUnavailableError("Too many pending device authorizations; retry later", retry_after=wait)
        data["expires_in"] = max(1, round(cred.expires_at - now))  # shorter while the store is under pressure
        return 200, data, default_json_headers
