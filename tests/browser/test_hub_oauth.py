"""JupyterHub acceptance with the standard login: oauthenticator's ``GenericOAuthenticator`` against the
reference catalog's embedded issuer (authorization code + PKCE), on the hub of ``tests/browser/test_hub.py``.

The test's HTTP client is the browser: hub login -> issuer sign-in page (followed redirects) -> form
posted -> back through the hub's proxy to ``/hub/oauth_callback``. Then a kernel in the spawned server
runs ``lakesession.spark()`` as that user and keeps working across token refreshes by the hub
(``lakesession.hub.configure``'s ``refresh_user_hook``). Kernels and the test compare token hashes only.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests._hub import KERNEL_REFRESH, KERNEL_SCAN, Hub, Login, Notebook, run_hub, sha
from tests._hub import tail as _tail
from tests.browser.test_hub import KERNEL_AFTER_REFRESH, alice_notebook
from tests.catalog.test_authcode import form_fields
from tests.factories import free_port, make_catalog

TOKEN_TTL = 20  # seconds: the hub refreshes within half of it, the kernel re-reads 2 s before expiry
ALICE_SECRET = "alice-oauth-secret-" + secrets.token_hex(8)
HUB_CLIENT_SECRET = "hub-client-secret-" + secrets.token_hex(8)


def _bootstrap(callback: str) -> str:
    return f"""
principals:
  - {{name: alice, type: user, client_id: alice, client_secret: {ALICE_SECRET}}}
  - {{name: jupyterhub, type: service, client_secret: {HUB_CLIENT_SECRET}, redirect_uris: [{callback}]}}
roles:
  - {{name: hubusers, members: [alice]}}
grants:
  - {{role: hubusers, privilege: NAMESPACE_READ_PROPERTIES, on: namespace hub}}
  - {{role: hubusers, privilege: TABLE_LIST, on: namespace hub}}
  - {{role: hubusers, privilege: TABLE_CREATE, on: namespace hub}}
  - {{role: hubusers, privilege: TABLE_WRITE_DATA, on: namespace hub}}
"""


@pytest.fixture(scope="module")
def oauth_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    run_dir = tmp_path_factory.mktemp("hub-oauth")
    port = free_port()
    callback = f"http://127.0.0.1:{port}/hub/oauth_callback"
    policy = _bootstrap(callback)
    with make_catalog(policy, data_dir=run_dir / "catalog", access_token_ttl=TOKEN_TTL) as cat:
        with run_hub(
            run_dir,
            port,
            cat,
            "jupyterhub_oauth_config.py",
            drop=("OAUTH",),
            extra_env={"LAKESESSION_TEST_HUB_CLIENT_SECRET": HUB_CLIENT_SECRET},
            extra_secrets=[ALICE_SECRET, HUB_CLIENT_SECRET],
        ) as handle:
            yield handle


def _oauth_login(hub: Hub, user: str, password: str) -> Login:
    """What a browser does: hub login -> the issuer's sign-in page -> form posted -> hub callback."""
    browser = httpx.Client(base_url=hub.url, timeout=30)
    page = browser.get("/hub/oauth_login", follow_redirects=True)
    assert page.status_code == 200, (page.status_code, page.text[:500])
    assert str(page.url).startswith(f"{hub.catalog.issuer_uri}/authorize?"), page.url
    fields = form_fields(page.text)
    assert fields["client_id"] == "jupyterhub" and fields["code_challenge_method"] == "S256" and fields["state"]
    signed_in = browser.post(
        f"{hub.catalog.issuer_uri}/authorize", data={**fields, "username": user, "password": password}
    )
    assert signed_in.status_code == 302, signed_in.text[:500]
    callback = signed_in.headers["location"]
    assert callback.startswith(f"{hub.url}/hub/oauth_callback?")  # back through the hub's proxy
    assert parse_qs(urlsplit(callback).query)["state"] == [fields["state"]]
    done = browser.get(callback)
    assert done.status_code == 302, f"{done.status_code}; log:\n{_tail(hub.log)}"
    browser.get("/hub/home")  # sets the _xsrf cookie, as a page load in a browser does
    created = browser.post(
        f"/hub/api/users/{user}/tokens",
        json={"note": "test_hub_oauth", "expires_in": 3600},
        headers={"X-XSRFToken": browser.cookies.get("_xsrf", path="/hub/") or ""},
    )
    assert created.status_code == 201, created.text[:300]
    return Login(browser, created.json()["token"])


@pytest.fixture(scope="module")
def oauth_notebook(oauth_hub: Hub) -> Iterator[Notebook]:
    """alice logs in through GenericOAuthenticator, her server spawns, a kernel runs ``lakesession.spark()``."""
    yield from alice_notebook(oauth_hub, _oauth_login(oauth_hub, "alice", ALICE_SECRET))


@pytest.mark.slow
def test_generic_oauthenticator_login_and_spark_act_as_the_user(oauth_hub: Hub, oauth_notebook: Notebook) -> None:
    state = oauth_hub.auth_state("alice")
    assert set(state) >= {"access_token", "refresh_token", "id_token", "token_response", "oauth_user"}
    assert state["oauth_user"]["sub"] == "alice"
    started = oauth_notebook.started
    assert started["env"]["LAKESESSION_IDENTITY"] == "jupyterhub"
    assert started["env"]["LAKESESSION_ISSUER"] == oauth_hub.catalog.issuer_uri
    assert started["initial"] in {sha(t) for t in oauth_hub.secrets}  # the hook passed the hub's token
    assert started["kind"] == "jupyterhub" and started["principal"] == "alice"
    assert started["initial_left_in_env"] is False and started["token_in_jvm_env"] is False
    done = oauth_notebook.spark
    assert done["n"] == 2 and done["total"] == 29.5
    assert done["denied"] and "secret.t" in done["denied"], done
    audit = oauth_hub.catalog.admin.audit(principal="alice", since=oauth_notebook.since - 1)
    decisions = {(r.securable, r.decision) for r in audit}
    assert ("table hub.orders", "allow") in decisions and ("table secret.t", "deny") in decisions, decisions


@pytest.mark.slow
def test_kernel_sees_the_tokens_the_hub_refreshes(oauth_hub: Hub, oauth_notebook: Notebook) -> None:
    kernel = oauth_notebook.kernel
    before = oauth_hub.auth_state("alice")
    out = kernel.check(KERNEL_REFRESH.format(limit=TOKEN_TTL + 15), timeout=TOKEN_TTL + 120).json_lines()[-1]
    after = oauth_hub.auth_state("alice")
    assert out["before"] != out["after"], "the kernel's token did not change within one token lifetime"
    assert out["after"] == sha(after["access_token"])  # ... to the token the hub refreshed
    assert after["access_token"] != before["access_token"]
    assert after["refresh_token"] != before["refresh_token"]  # rotated, and the hub kept the new one
    assert after["expires_at"] > time.time() - 5  # the hook records the expiry it passes on
    assert kernel.check(KERNEL_AFTER_REFRESH).json_lines()[-1]["cols"] == ["id", "amount"]
    audit = oauth_hub.catalog.admin.audit(principal="alice", since=out["refreshed_at"] - 0.5)
    assert any(r.securable == "table hub.orders" and r.decision == "allow" for r in audit)


@pytest.mark.slow
def test_no_secret_in_hub_server_or_kernel_logs(oauth_hub: Hub, oauth_notebook: Notebook) -> None:
    oauth_hub.auth_state("alice")
    cookie_secret = (oauth_hub.log.parent / "jupyterhub_cookie_secret").read_text().strip()
    text = oauth_hub.log.read_text(errors="replace")
    assert "User logged in: alice" in text and "Spawning" in text
    leaked = [f"secret #{i}" for i, v in enumerate(sorted(oauth_hub.secrets | {cookie_secret})) if v in text]
    assert not leaked, f"{len(leaked)} of {len(oauth_hub.secrets) + 1} secrets appear in the hub's log"
    scan = oauth_notebook.kernel.check(KERNEL_SCAN.format(log=str(oauth_hub.log))).json_lines()[-1]
    assert scan["secrets"] >= 1 and scan["leaked"] == 0, scan


@pytest.mark.slow
def test_forged_callback_and_wrong_password_do_not_log_in(oauth_hub: Hub) -> None:
    with httpx.Client(base_url=oauth_hub.url, timeout=30) as browser:
        # a callback with a code but no login started in this browser (no state cookie): refused
        forged = browser.get("/hub/oauth_callback", params={"code": "x" * 48, "state": "y" * 20})
        assert forged.status_code in (400, 403) and "jupyterhub-session-id" not in forged.headers.get("set-cookie", "")
        page = browser.get("/hub/oauth_login", follow_redirects=True)
        wrong = browser.post(
            f"{oauth_hub.catalog.issuer_uri}/authorize",
            data={**form_fields(page.text), "username": "alice", "password": "not-" + ALICE_SECRET},
        )
        assert wrong.status_code == 401 and "location" not in wrong.headers
        assert browser.get("/hub/api/user").status_code in (401, 403)


def test_configure_sets_the_oauthenticator_refresh_hook_unless_one_is_set() -> None:
    from traitlets.config import Config

    import lakesession.hub

    c = Config()
    lakesession.hub.configure(c, catalog_uri="https://cat.example")
    assert c.OAuthenticator.refresh_user_hook is lakesession.hub.refresh_user_hook

    def theirs(authenticator: object, user: object, auth_state: object) -> bool:
        return True

    c = Config()
    c.OAuthenticator.refresh_user_hook = theirs
    lakesession.hub.configure(c, catalog_uri="https://cat.example")
    assert c.OAuthenticator.refresh_user_hook is theirs
