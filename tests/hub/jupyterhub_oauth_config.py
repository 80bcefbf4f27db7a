"""JupyterHub configuration of tests/browser/test_hub_oauth.py: the hub of ``jupyterhub_config.py`` (same proxy,
spawner, test service and lakesession hooks), logging in through oauthenticator's ``GenericOAuthenticator``
(authorization code + PKCE) at the reference catalog's embedded issuer instead of the device grant."""

import os

from oauthenticator.generic import GenericOAuthenticator

c = get_config()  # type: ignore[name-defined]  # noqa: F821
load_subconfig(os.path.join(os.path.dirname(__file__), "jupyterhub_config.py"))  # type: ignore[name-defined]  # noqa: F821

env = os.environ
issuer = env["LAKESESSION_TEST_HUB_ISSUER"]

# what the README's JupyterHub section documents (lakesession.hub.configure ran in the subconfig)
c.JupyterHub.authenticator_class = GenericOAuthenticator
c.GenericOAuthenticator.client_id = "jupyterhub"
c.GenericOAuthenticator.client_secret = env["LAKESESSION_TEST_HUB_CLIENT_SECRET"]
c.GenericOAuthenticator.oauth_callback_url = f"http://127.0.0.1:{env['LAKESESSION_TEST_HUB_PORT']}/hub/oauth_callback"
c.GenericOAuthenticator.authorize_url = f"{issuer}/authorize"
c.GenericOAuthenticator.token_url = f"{issuer}/token"
c.GenericOAuthenticator.userdata_url = f"{issuer}/userinfo"
c.GenericOAuthenticator.username_claim = "sub"
c.GenericOAuthenticator.scope = ["openid", "catalog"]
c.GenericOAuthenticator.basic_auth = True
c.GenericOAuthenticator.enable_pkce = True
c.GenericOAuthenticator.allow_all = True
