"""``lakesession.hub.oidc_login`` / ``discover`` (GenericOAuthenticator from an issuer's discovery document) and the
hub's ``principal_claim`` (the kernel names the user as the catalog does), against real loopback HTTP servers:
the reference catalog's embedded issuer, and a small server answering what a wrong or hostile issuer URL would.
The same code against a real Keycloak: ``tests/keycloak/test_keycloak_hub.py``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import OctKey
from traitlets.config import Config

import lakesession.hub
from lakesession.errors import ConfigError
from lakesession.reference import ReferenceCatalog
from tests._stub import QuietHandler, StubServer


@pytest.fixture
def answers() -> Iterator[tuple[str, dict[str, Any]]]:
    """A loopback server answering ``/.well-known/openid-configuration`` with ``answers['doc']`` (status
    ``answers['status']``); yields (its base URL, the dict to fill)."""
    said: dict[str, Any] = {"status": 200, "doc": {}}

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.reply(said["status"] if self.path.endswith("/openid-configuration") else 404, said["doc"])

    with StubServer(Handler) as server:
        yield f"{server.url}/realms/lake", said


def _doc(issuer: str, **extra: Any) -> dict[str, Any]:
    base = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/protocol/openid-connect/auth",
        "token_endpoint": f"{issuer}/protocol/openid-connect/token",
        "userinfo_endpoint": f"{issuer}/protocol/openid-connect/userinfo",
        "code_challenge_methods_supported": ["plain", "S256"],
    }
    return {**base, **extra}


def test_oidc_login_takes_the_endpoints_from_the_issuers_discovery_document(catalog: ReferenceCatalog) -> None:
    c = Config()
    doc = lakesession.hub.oidc_login(
        c, issuer=catalog.issuer_uri + "/", client_secret="s3cret", allowed_groups=["analysts", "analysts", "etl"]
    )
    g = c.GenericOAuthenticator
    assert c.JupyterHub.authenticator_class == "oauthenticator.generic.GenericOAuthenticator"
    assert doc["issuer"] == catalog.issuer_uri
    assert (g.authorize_url, g.token_url, g.userdata_url) == (
        f"{catalog.issuer_uri}/authorize",
        f"{catalog.issuer_uri}/token",
        f"{catalog.issuer_uri}/userinfo",
    )
    assert g.enable_pkce is True and g.basic_auth is True and g.client_id == "jupyterhub"
    assert g.client_secret == "s3cret" and g.username_claim == "preferred_username"
    assert g.auth_state_groups_key == "oauth_user.groups" and g.manage_groups is True
    assert g.allowed_groups == {"analysts", "etl"} and "admin_groups" not in g
    # the config loads into the real GenericOAuthenticator (traits accept every value written)
    from oauthenticator.generic import GenericOAuthenticator

    auth = GenericOAuthenticator(config=c)
    assert auth.token_url == f"{catalog.issuer_uri}/token" and auth.allowed_groups == {"analysts", "etl"}


def test_oidc_login_without_groups_leaves_group_settings_alone(catalog: ReferenceCatalog) -> None:
    c = Config()
    lakesession.hub.oidc_login(c, issuer=catalog.issuer_uri, groups_claim=None, username_claim="sub")
    g = c.GenericOAuthenticator
    assert "manage_groups" not in g and "auth_state_groups_key" not in g and "client_secret" not in g
    assert g.username_claim == "sub"
    with pytest.raises(ConfigError, match="allowed_groups needs groups_claim"):
        lakesession.hub.oidc_login(Config(), issuer=catalog.issuer_uri, groups_claim=None, allowed_groups=["a"])


def test_a_discovery_document_naming_another_issuer_is_refused(answers: tuple[str, dict[str, Any]]) -> None:
    """A mistyped or hijacked issuer URL whose document sends logins (and the client secret) elsewhere."""
    url, said = answers
    said["doc"] = _doc("https://sso.evil.example/realms/lake")
    c = Config()
    with pytest.raises(ConfigError, match=r"names issuer 'https://sso.evil.example/realms/lake', not 'http://"):
        lakesession.hub.oidc_login(c, issuer=url, client_secret="s3cret")
    assert "token_url" not in c.GenericOAuthenticator and "authenticator_class" not in c.JupyterHub


@pytest.mark.parametrize(
    ("status", "change", "message"),
    [
        (404, {}, "answered HTTP 404: check the issuer URL"),
        (200, {"userinfo_endpoint": None}, "lacks userinfo_endpoint"),
        (200, {"code_challenge_methods_supported": ["plain"]}, "does not list PKCE S256"),
    ],
)
def test_unusable_discovery_documents_name_the_fix(
    answers: tuple[str, dict[str, Any]], status: int, change: dict[str, Any], message: str
) -> None:
    url, said = answers
    said["status"], said["doc"] = status, _doc(url, **change)
    with pytest.raises(ConfigError, match=message):
        lakesession.hub.discover(url)


def test_unreachable_or_non_url_issuers_name_the_fix() -> None:
    from tests.factories import free_port

    with pytest.raises(ConfigError, match="cannot read http://127.0.0.1:.*is the issuer URL right"):
        lakesession.hub.discover(f"http://127.0.0.1:{free_port()}/realms/lake", timeout=2)
    with pytest.raises(ConfigError, match="not an http"):
        lakesession.hub.discover("sso.example.com/realms/lake")


def test_the_kernel_names_the_user_by_the_configured_claim() -> None:
    """Keycloak's ``sub`` is a UUID: with ``configure(principal_claim='preferred_username')`` the kernel's
    identity shows ``alice``, as the catalog (``--principal-claim preferred_username``) does."""
    c = Config()
    lakesession.hub.configure(c, catalog_uri="https://cat.example", principal_claim="preferred_username")
    assert c.Spawner.environment["LAKESESSION_PRINCIPAL_CLAIM"] == "preferred_username"
    claims = {"sub": "4f1c0a9e-uuid", "preferred_username": "alice", "exp": int(time.time()) + 600}
    token = jwt.encode({"alg": "HS256"}, claims, OctKey.generate_key(256))
    hub_env = {
        "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api",
        "JUPYTERHUB_USER": "alice",
        "JUPYTERHUB_API_TOKEN": "hub-api-token-value",
    }
    env = {**c.Spawner.environment, **hub_env, "LAKESESSION_HUB_ACCESS_TOKEN": token}
    source = lakesession.hub.identity_from_env(environ=env)
    assert source is not None and source.principal == "alice" and source.describe()["principal"] == "alice"
    plain = lakesession.hub.identity_from_env(environ={**hub_env, "LAKESESSION_IDENTITY": "jupyterhub",
                                                      "LAKESESSION_HUB_ACCESS_TOKEN": token})  # fmt: skip
    assert plain is not None and plain.principal == "4f1c0a9e-uuid"  # without it: sub, as before


class _HubUser:
    """What oauthenticator's refresh hook gets from JupyterHub: a name and the user's stored auth_state."""

    def __init__(self, name: str, state: dict[str, Any]):
        self.name, self.state, self.saved = name, state, 0

    async def get_auth_state(self) -> dict[str, Any]:
        return dict(self.state)

    async def save_auth_state(self, state: dict[str, Any]) -> None:
        self.state, self.saved = dict(state), self.saved + 1


@pytest.mark.parametrize("allowed", [True, False])
def test_refresh_hook_refreshes_only_users_the_hub_still_allows(catalog: ReferenceCatalog, allowed: bool) -> None:
    """At the embedded issuer, with alice's real authorization-code tokens: ``refresh_user_hook`` asks the
    authenticator's ``check_allowed`` again; a user no longer allowed (here: not in ``allowed_groups``, her
    userinfo has no groups) gets ``False`` and no new tokens."""
    import asyncio

    from oauthenticator.generic import GenericOAuthenticator

    from lakesession.reference import bootstrap
    from tests.catalog.test_authcode import CLIENTS, HUB, HUB_SECRET, REDIRECT, get_code, params, pkce, redeem

    catalog.admin.apply_bootstrap(bootstrap.parse(CLIENTS))  # the authorization-code tests' web client
    verifier, challenge = pkce()
    tokens = redeem(catalog, get_code(catalog, params(challenge)), verifier).json()
    c = Config()
    lakesession.hub.oidc_login(c, issuer=catalog.issuer_uri, client_id=HUB, client_secret=HUB_SECRET,
                               scope=("openid", "catalog"), callback_url=REDIRECT,
                               allowed_groups=() if allowed else ("analysts",))  # fmt: skip
    c.Authenticator.allow_all = allowed
    auth = GenericOAuthenticator(config=c)
    now = time.time()
    state = {"access_token": tokens["access_token"], "refresh_token": tokens["refresh_token"],
             "issued_at": now - 600, "expires_at": now + 5}  # fmt: skip  # due for a refresh
    user = _HubUser("alice", state)
    result = asyncio.run(lakesession.hub.refresh_user_hook(auth, user, dict(state)))
    if allowed:
        assert isinstance(result, dict) and result["name"] == "alice" and user.saved == 1
        assert user.state["access_token"] != tokens["access_token"] and user.state["expires_at"] > now + 5
    else:
        assert result is False and user.saved == 0 and user.state == state
