"""JupyterHub configuration of tests/keycloak/test_keycloak_hub.py: the hub of ``jupyterhub_config.py`` (same proxy,
spawner, test service and lakesession hooks) logging in at a Keycloak realm through oauthenticator's
``GenericOAuthenticator``, set up by ``lakesession.hub.oidc_login`` from the realm's discovery document — what
docs/how-to/keycloak.md shows. ONE issuer (``LAKESESSION_TEST_HUB_ISSUER``) for the hub and the catalog."""

import os

import lakesession.hub

c = get_config()  # type: ignore[name-defined]  # noqa: F821
load_subconfig(os.path.join(os.path.dirname(__file__), "jupyterhub_config.py"))  # type: ignore[name-defined]  # noqa: F821

env = os.environ
lakesession.hub.oidc_login(
    c,
    issuer=env["LAKESESSION_TEST_HUB_ISSUER"],
    client_id="jupyterhub",
    client_secret=env["LAKESESSION_TEST_HUB_CLIENT_SECRET"],
    username_claim="preferred_username",
    groups_claim="groups",
    allowed_groups=["analysts"],
    callback_url=f"http://127.0.0.1:{env['LAKESESSION_TEST_HUB_PORT']}/hub/oauth_callback",
)
c.Authenticator.allow_all = False  # the subconfig lets everyone in; here only Keycloak's group analysts
