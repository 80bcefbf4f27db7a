"""``DeviceCode``: the user logs in once in a browser (RFC 8628), then the refresh token keeps the session going."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from authlib.common.security import generate_token
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from ._base import Token
from ._cache import TokenCache
from ._claims import claim_str
from ._errors import LOGIN_HINT, DeviceFlowError, LoginRequiredError, SignInBusyError, _OAuthRejected, _Transient
from ._flows import _OAuthSource, rejected
from ._oauth import DEVICE_CODE_GRANT, busy, call, post_form, transient_status

logger = logging.getLogger("lakesession.identity")

DEFAULT_INTERVAL = 5  # RFC 8628 §3.2: when the server names none
SLOW_DOWN_STEP = 5  # RFC 8628 §3.5
POLL_SLACK = 0.05  # poll a hair after the interval, never early


@dataclass(frozen=True)
class DevicePrompt:
    """What the user needs to approve the login: open ``verification_uri`` and enter ``user_code``."""

    verification_uri: str
    verification_uri_complete: str | None
    user_code: str
    expires_in: int

    def message(self) -> str:
        if self.verification_uri_complete:
            return (
                f"To sign in, open {self.verification_uri_complete}\n"
                f"(or open {self.verification_uri} and enter the code {self.user_code}); "
                f"the code expires in {self.expires_in // 60} min."
            )
        return (
            f"To sign in, open {self.verification_uri} and enter the code {self.user_code}; "
            f"it expires in {self.expires_in // 60} min."
        )


def print_prompt(prompt: DevicePrompt) -> None:
    print(prompt.message(), flush=True)


def _sleep(seconds: float) -> None:  # a seam for tests
    if seconds > 0:
        time.sleep(seconds)


class DeviceCode(_OAuthSource):
    """RFC 8628 device authorization for a user, then rotating refresh tokens.

    ``login()`` asks the issuer for a device code, shows the verification URI
    and user code (``on_prompt``, default: print), and polls the token endpoint
    at the server's interval until the user approved, denied, or the code
    expired. Afterwards ``token()`` refreshes with the refresh token and stores
    the rotated successor (also in ``cache``, if given, so the next process
    starts logged in).

    ``pkce`` (default on): send an RFC 7636 S256 ``code_challenge`` with the device authorization and its
    ``code_verifier`` with each poll. Issuers that require PKCE for a public client (Keycloak's
    ``pkce.code.challenge.method``) refuse a device login without it; others ignore the unknown
    parameters (RFC 6749 §3.1, §3.2). ``from_issuer`` turns it off only for an issuer whose discovery
    lists ``code_challenge_methods_supported`` without S256.
    """

    kind = "device_code"

    def __init__(
        self,
        device_authorization_url: str,
        token_url: str,
        client_id: str,
        scope: str | None = None,
        on_prompt: Callable[[DevicePrompt], None] | None = None,
        timeout: float = 600,
        *,
        client_secret: str | None = None,
        issuer: str | None = None,
        cache: TokenCache | None = None,
        http_options: Mapping[str, Any] | None = None,
        refresh_margin: float | None = None,
        pkce: bool = True,
    ):
        super().__init__(
            token_url,
            client_id,
            client_secret,
            issuer=issuer,
            cache=cache,
            http_options=http_options,
            refresh_margin=refresh_margin,
        )
        self._device_url = device_authorization_url
        self._scope = scope
        self._on_prompt = on_prompt or print_prompt
        self._timeout = timeout
        self._auth_method = "client_secret_basic" if client_secret else "none"
        self._pkce = pkce
        # a poll's 429/503 keeps its status and Retry-After (authlib would reduce it to an OAuth error code)
        self._client.register_compliance_hook("access_token_response", self._keep_busy_answer)

    def _keep_busy_answer(self, response: Any) -> Any:
        if transient_status(response.status_code):
            raise busy(self._token_url, response)
        return response

    @property
    def logged_in(self) -> bool:
        """True once there is a refresh token (from ``login()`` or the cache)."""
        cur = self._current
        return cur is not None and cur.refresh_token is not None

    # -- RFC 8628 -------------------------------------------------------------------------------
    def login(self) -> None:
        """Run the device flow now (blocks until approved, denied, expired, or ``timeout`` seconds)."""
        data = {"scope": self._scope} if self._scope else {}
        verifier = generate_token(64) if self._pkce else None  # RFC 7636 §4.1: 43-128 unreserved characters
        if verifier is not None:
            data.update(code_challenge=create_s256_code_challenge(verifier), code_challenge_method="S256")
        try:
            grant = post_form(self._client, self._device_url, data, self._auth_method)
        except _Transient as exc:
            if exc.status is not None:  # the issuer answered: the network is fine, the service is not
                raise self._unavailable(exc, self._device_url, "start the device login") from None
            raise DeviceFlowError(
                f"Cannot start the device login: {exc.reason}. Check the issuer URL and the "
                "network, then call login() again."
            ) from None
        except _OAuthRejected as exc:
            raise self._refused(exc) from None
        try:
            device_code = str(grant["device_code"])
            prompt = DevicePrompt(
                verification_uri=str(grant.get("verification_uri") or grant["verification_url"]),
                verification_uri_complete=grant.get("verification_uri_complete"),
                user_code=str(grant["user_code"]),
                expires_in=int(grant.get("expires_in") or self._timeout),
            )
            interval = float(grant.get("interval") or DEFAULT_INTERVAL)
        except (KeyError, TypeError, ValueError):
            raise DeviceFlowError(
                f"{self._device_url} did not answer with a device authorization response. "
                "Check that it is the issuer's device_authorization_endpoint."
            ) from None
        logger.info(
            "device login started at %s: waiting for the user to approve code %s", self._where, prompt.user_code
        )
        self._on_prompt(prompt)
        token = self._poll(device_code, verifier, interval, min(float(self._timeout), float(prompt.expires_in)))
        self._install(token)
        logger.info(
            "device login complete: signed in as %r at %s",
            claim_str(token.claims, "preferred_username") or claim_str(token.claims, "sub"),  # Keycloak: sub is a UUID
            self._where,
        )

    def _refused(self, exc: _OAuthRejected) -> DeviceFlowError:
        """The issuer's no to the device authorization, with the fix: PKCE on or off, or the client's setup."""
        said = (exc.description or "").lower()
        about_pkce = "code_challenge" in said or "pkce" in said
        if about_pkce and ("missing" in said or not self._pkce):
            hint = (
                f"The client {self._client_id!r} requires PKCE: leave pkce on (DeviceCode(..., pkce=True), "
                "the default) and call login() again."
            )
        elif about_pkce:
            hint = (
                "This issuer does not accept PKCE on the device flow: pass pkce=False "
                "(DeviceCode(..., pkce=False) or from_issuer(..., pkce=False)) and call login() again."
            )
        else:
            hint = f"Check the client id ({self._client_id!r}) and that the client may use the device flow."
        return DeviceFlowError(f"The issuer at {self._where} refused the device authorization ({exc.detail()}). {hint}")

    def _unavailable(self, exc: _Transient, url: str, doing: str) -> DeviceFlowError:
        """One line for an HTTP answer that is not a refusal: busy (429/503, with the server's Retry-After) or failing."""
        status = exc.status or 0
        when = f"try again in {max(1, round(exc.retry_after))} s" if exc.retry_after is not None else "try again later"
        if status in (429, 503):
            return SignInBusyError(
                f"The catalog's sign-in service is busy (HTTP {status}); {when}, then call login() again "
                f"({url} could not {doing}).",
                status,
                exc.retry_after,
            )
        return DeviceFlowError(
            f"The catalog's sign-in service failed (HTTP {status}); {when}, then call login() again "
            f"({url} could not {doing})."
        )

    def _poll(self, device_code: str, verifier: str | None, interval: float, budget: float) -> Token:
        deadline = time.monotonic() + budget
        failures = 0
        told: _Transient | None = None  # the last HTTP answer of a busy or failing server (its Retry-After, if any)
        url = self._token_url
        while True:
            wait = interval + POLL_SLACK
            if failures:
                wait += random.uniform(0, min(30.0, 2.0**failures))  # RFC 8628 §3.5: back off on errors
            if told is not None and told.retry_after is not None:
                wait = max(wait, told.retry_after)  # the server said when: never sooner
            if time.monotonic() + wait >= deadline:
                if told is not None and told.status is not None:
                    raise self._unavailable(told, self._token_url, "finish the device login before the code expires")
                raise DeviceFlowError(
                    f"The device login was not approved within {budget:.0f} s. "
                    "Call login() again and approve the code in the browser sooner."
                )
            _sleep(wait)
            extra = {"code_verifier": verifier} if verifier is not None else {}  # RFC 7636 §4.5
            try:
                response = call(
                    url,
                    functools.partial(
                        self._client.fetch_token, url, grant_type=DEVICE_CODE_GRANT, device_code=device_code, **extra
                    ),
                )
            except _Transient as exc:
                failures += 1
                told = exc if exc.status is not None else None
                if exc.error == "slow_down":
                    interval += SLOW_DOWN_STEP
                logger.warning("polling %s for the device login failed (%s); retrying", self._where, exc.reason)
                continue
            except _OAuthRejected as exc:
                failures, told = 0, None
                if exc.error == "authorization_pending":
                    continue
                if exc.error == "slow_down":
                    interval += SLOW_DOWN_STEP
                    logger.debug("issuer asked to slow down; polling every %.0f s", interval)
                    continue
                if exc.error == "expired_token":
                    raise DeviceFlowError(
                        "The device code expired before it was approved. Call login() again and approve the new code."
                    ) from None
                if exc.error == "access_denied":
                    raise DeviceFlowError(
                        "The login was denied in the browser. Call login() again and "
                        "approve it (as the right user) to continue."
                    ) from None
                raise DeviceFlowError(
                    f"The device login failed ({exc.detail()}). Call login() again; "
                    "if it keeps failing, check the client's configuration at the issuer."
                ) from None
            token = Token.from_response(response)
            if token.refresh_token is None:
                logger.warning(
                    "the issuer at %s issued no refresh token: you will have to log in again when "
                    "the access token expires",
                    self._where,
                )
            return token

    # -- refresh --------------------------------------------------------------------------------
    def _obtain(self, current: Token | None) -> Token:
        refresh = current.refresh_token if current is not None else None
        if not refresh:
            what = "Not logged in" if current is None else "The login has ended (no refresh token)"
            raise LoginRequiredError(f"{what} at {self._where}. To log in, {LOGIN_HINT}.")
        url = self._token_url
        try:
            response = call(url, lambda: self._client.refresh_token(url, refresh_token=refresh))
        except _OAuthRejected as exc:
            if exc.error == "invalid_grant":
                self._forget()
                raise LoginRequiredError(
                    f"The login at {self._where} has ended: the refresh token was rejected "
                    f"({exc.detail()}). To log in again, {LOGIN_HINT}."
                ) from None
            raise rejected(exc, self._where, self._client_id) from None
        return Token.from_response(response, previous_refresh=refresh)  # rotation-aware: keeps a new one
