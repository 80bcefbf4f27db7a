"""JupyterHub with Keycloak (issue 41): oauthenticator's ``GenericOAuthenticator`` at a real Keycloak 26.7.3 realm,
tokens passed to the kernel, one issuer for hub and catalog.

One realm (the module's own, on the session's Keycloak), one catalog and one hub for the module:

* the catalog is ``lakesession serve --issuer-url <realm> --principal-claim preferred_username --roles-claim groups``
  (``tests/keycloak/_catalog.py``): role ``analysts`` reads ``sales.orders``; who holds it is Keycloak's group;
* the hub (``tests/hub/jupyterhub_keycloak_config.py``) is set up by ``lakesession.hub.oidc_login`` from the realm's
  discovery document: authorization code + PKCE S256, ``username_claim = preferred_username``, groups from the
  ``groups`` claim (``allowed_groups = {analysts}``, ``manage_groups``), and ``lakesession.hub.configure``;
* alice signs in on **Keycloak's own login form in Debian's Chromium** (Playwright); her server spawns, and a
  kernel there runs ``lakesession.spark()`` with nothing but the hook's variables and reads ``sales.orders`` as
  alice (the catalog's audit says so) through her group;
* the ``jupyterhub`` client's access tokens live 20 s (admin API): the hub refreshes them (Keycloak's refresh
  tokens, first non-rotating, then with the realm's ``revokeRefreshToken`` on: each may be used once), the
  kernel re-reads them and Spark keeps reading;
* bob (in no group) is refused by the hub; no secret reaches the hub's log.

Token values never leave the processes holding them: kernels and the test compare SHA-256 hashes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests._browser import chromium_page
from tests._hub import KERNEL_REFRESH, KERNEL_SCAN, KERNEL_START, Hub, Upstream, run_hub, sha, tail, wait_for_server
from tests._keycloak import Keycloak, claims_of
from tests._serve import Served
from tests.factories import free_port
from tests.hub.kernel import Kernel
from tests.keycloak._catalog import audit, served_by_realm
from tests.keycloak._form import Browser, parse

pytestmark = [pytest.mark.slow, pytest.mark.keycloak]

# seconds, the jupyterhub client's access tokens: the hub refreshes at 10 s left, the kernel re-reads at 2 s left
TOKEN_TTL = 20

KERNEL_READ = """
from lakesession.identity._claims import unverified_claims
_rows = spark.sql("SELECT id, region FROM lake.sales.orders ORDER BY id").collect()
seen.add(s.identity.token())
_first = unverified_claims(_initial)  # the token the spawner hook passed (claims only, never the token)
print(json.dumps({"rows": [[r.id, r.region] for r in _rows], "principal": s.identity.principal,
                  "initial": {k: _first.get(k) for k in ("iss", "azp", "preferred_username", "sid")}}))
"""


@dataclass
class KcHub:
    kc: Keycloak
    served: Served
    hub: Hub


def _set_client(kc: Keycloak, client_id: str, **attributes: str) -> None:
    found = kc.admin("GET", "/clients", params={"clientId": client_id}, timeout=30).json()
    rep = found[0]
    rep["attributes"] = {**rep.get("attributes", {}), **attributes}
    r = kc.admin("PUT", f"/clients/{rep['id']}", json=rep, timeout=30)
    assert r.status_code == 204, r.text


def _set_realm(kc: Keycloak, **settings: Any) -> None:
    r = kc.admin("PUT", "", json=settings, timeout=30)
    assert r.status_code == 204, r.text


@pytest.fixture(scope="module")
def kc_hub(kc: Keycloak, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KcHub]:
    run_dir = tmp_path_factory.mktemp("kc-hub")
    _set_client(kc, "jupyterhub", **{"access.token.lifespan": str(TOKEN_TTL)})
    with served_by_realm(kc, run_dir / "catalog") as srv:
        upstream = Upstream(kc.issuer, srv.uri, srv.lines["warehouse"], srv)
        secrets = [kc.admin_password, *kc.client_secrets.values(), *kc.passwords.values()]
        with run_hub(
            run_dir,
            free_port(),
            upstream,
            "jupyterhub_keycloak_config.py",
            drop=("OAUTH",),
            extra_env={
                "LAKESESSION_TEST_HUB_CLIENT_SECRET": kc.client_secrets["jupyterhub"],
                "LAKESESSION_TEST_HUB_PRINCIPAL_CLAIM": "preferred_username",
            },
            extra_secrets=secrets,
        ) as hub:
            yield KcHub(kc, srv, hub)


def _browser_login(page: Any, hub: Hub, kc: Keycloak, user: str) -> str:
    """alice in Chromium: the hub's login -> Keycloak's login form, filled and sent -> back at the hub, whose
    server starts; then an API token for the test's kernel client, made by the page itself. Returns it."""
    page.goto(f"{hub.url}/hub/oauth_login")
    page.wait_for_selector("#kc-form-login")
    assert page.url.startswith(f"{kc.issuer}/protocol/openid-connect/auth?"), page.url
    assert "code_challenge_method=S256" in page.url and "client_id=jupyterhub" in page.url
    page.fill("#username", user)
    page.fill("#password", kc.passwords[user])
    page.click("#kc-login")
    page.wait_for_url(f"{hub.url}/**", timeout=60_000)
    page.goto(f"{hub.url}/hub/home")
    created = page.evaluate(
        """async (user) => {
          const r = await fetch(`/hub/api/users/${user}/tokens`, {method: 'POST',
            headers: {'X-XSRFToken': window.jhdata.xsrf_token, 'Content-Type': 'application/json'},
            body: JSON.stringify({note: 'test_keycloak_hub', expires_in: 3600})});
          return {status: r.status, token: r.status === 201 ? (await r.json()).token : null};
        }""",
        user,
    )
    assert created["status"] == 201, f"{created['status']}; log:\n{tail(hub.log)}"
    token = str(created["token"])
    hub.secrets.add(token)
    httpx.post(f"{hub.url}/hub/api/users/{user}/server", headers={"Authorization": f"token {token}"}, timeout=60)
    wait_for_server(hub, user, token, timeout=180)
    return token


@dataclass
class Notebook:
    kernel: Kernel
    started: dict[str, Any]
    read: dict[str, Any]
    since: float


@pytest.fixture(scope="module")
def notebook(kc_hub: KcHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notebook]:
    hub, kc = kc_hub.hub, kc_hub.kc
    with chromium_page(tmp_path_factory.mktemp("kc-chromium")) as page:
        token = _browser_login(page, hub, kc, "alice")
    hub.auth_state("alice")
    kernel = Kernel(f"{hub.url}/user/alice", token)
    try:
        since = time.time()
        started = kernel.check(KERNEL_START, timeout=240).json_lines()[-1]
        read = kernel.check(KERNEL_READ, timeout=180).json_lines()[-1]
        yield Notebook(kernel, started, read, since)
    finally:
        kernel.close()


def test_alice_logs_in_at_keycloak_and_her_kernel_reads_as_her(kc_hub: KcHub, notebook: Notebook) -> None:
    hub, kc = kc_hub.hub, kc_hub.kc
    state = hub.auth_state("alice")
    user = state["oauth_user"]
    assert user["preferred_username"] == "alice" and user["sub"] == kc.user_id("alice")  # sub: Keycloak's UUID
    assert user["groups"] == ["analysts"]
    claims = claims_of(state["access_token"])
    assert claims["iss"] == kc.issuer and claims["azp"] == "jupyterhub" and "lakesession" in claims["aud"]
    model = httpx.get(
        f"{hub.url}/hub/api/users/alice", headers={"Authorization": f"token {hub.service_token}"}, timeout=30
    ).json()
    assert "analysts" in model["groups"]  # manage_groups: the hub's groups follow Keycloak's
    started = notebook.started
    assert started["env"] == {
        "LAKESESSION_URI": kc_hub.served.uri,
        "LAKESESSION_IDENTITY": "jupyterhub",
        "LAKESESSION_ISSUER": kc.issuer,  # ONE issuer for the hub, the catalog and the kernel
        "LAKESESSION_WAREHOUSE": kc_hub.served.lines["warehouse"],
    }
    # the hook passed a token of alice's hub login (it may have been refreshed since: compare its claims)
    assert notebook.read["initial"] == {
        "iss": kc.issuer,
        "azp": "jupyterhub",
        "preferred_username": "alice",
        "sid": claims_of(state["access_token"])["sid"],
    }
    assert started["kind"] == "jupyterhub" and started["principal"] == "alice"  # not the UUID in sub
    assert started["initial_left_in_env"] is False and started["token_in_jvm_env"] is False
    assert notebook.read["rows"] == [[1, "EU"], [2, "US"], [3, "EU"]]
    records = audit(kc_hub.served.data_dir, "alice")  # type: ignore[attr-defined]
    assert ("load_table", "table sales.orders", "allow") in records, records


def _refresh_once(kc_hub: KcHub, kernel: Kernel) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Wait in the kernel until its token changes; (auth_state before, after, what the kernel printed)."""
    before = kc_hub.hub.auth_state("alice")
    # two lifetimes: a loaded CI machine once saw no change within one (the kernel's view is in the message)
    out = kernel.check(KERNEL_REFRESH.format(limit=2 * TOKEN_TTL + 15), timeout=2 * TOKEN_TTL + 120).json_lines()[-1]
    after = kc_hub.hub.auth_state("alice")
    assert out["before"] != out["after"], f"the kernel's token did not change ({out}); log:\n{tail(kc_hub.hub.log)}"
    assert out["after"] == sha(after["access_token"])  # ... to the token the hub refreshed at Keycloak
    assert after["access_token"] != before["access_token"]
    return before, after, out


def test_hub_refreshes_at_keycloak_and_the_kernel_keeps_reading(kc_hub: KcHub, notebook: Notebook) -> None:
    kernel, kc = notebook.kernel, kc_hub.kc
    before, after, _ = _refresh_once(kc_hub, kernel)  # the realm's default: refresh tokens not revoked on use
    assert claims_of(after["access_token"])["sid"] == claims_of(before["access_token"])["sid"]  # same session
    assert after["expires_at"] - after["issued_at"] == pytest.approx(TOKEN_TTL, abs=1)
    _set_realm(kc, revokeRefreshToken=True, refreshTokenMaxReuse=0)  # rotation: each refresh token works once
    try:
        # the second refresh needs the refresh token the first one returned: reusing a spent one is refused
        # and ends the client's session at Keycloak (seen: invalid_grant "Session doesn't have required client")
        for _ in range(2):
            prior, now, _ = _refresh_once(kc_hub, kernel)
            assert now["refresh_token"] != prior["refresh_token"]
            again = kernel.check(KERNEL_READ, timeout=120).json_lines()[-1]
            assert again["rows"] == [[1, "EU"], [2, "US"], [3, "EU"]] and again["principal"] == "alice"
    finally:
        _set_realm(kc, revokeRefreshToken=False)
    assert "refused to refresh" not in kc_hub.hub.log.read_text(errors="replace")
    records = audit(kc_hub.served.data_dir, "alice")  # type: ignore[attr-defined]
    assert records.count(("load_table", "table sales.orders", "allow")) >= 2, records


def test_bob_in_no_group_is_refused_by_the_hub(kc_hub: KcHub) -> None:
    """bob signs in at Keycloak correctly (over HTTP, on its own form), but is in no allowed group."""
    hub, kc = kc_hub.hub, kc_hub.kc
    browser = Browser()
    try:
        page = browser.http.get(f"{hub.url}/hub/oauth_login")
        form = next(f for f in parse(page.text).forms if f.attrs.get("id") == "kc-form-login")
        done = browser.http.post(
            page.url.join(form.action), data={**form.fields, "username": "bob", "password": kc.passwords["bob"]}
        )
        assert str(done.url).startswith(f"{hub.url}/hub/oauth_callback"), done.url
        assert done.status_code == 403, (done.status_code, done.text[:300])
        assert browser.http.get(f"{hub.url}/hub/api/user").status_code in (401, 403)
    finally:
        browser.close()
    r = httpx.get(f"{hub.url}/hub/api/users/bob", headers={"Authorization": f"token {hub.service_token}"}, timeout=30)
    assert r.status_code == 404  # never became a hub user


def test_no_secret_in_the_hub_server_or_kernel_logs(kc_hub: KcHub, notebook: Notebook) -> None:
    hub = kc_hub.hub
    hub.auth_state("alice")
    cookie_secret = (Path(hub.log).parent / "jupyterhub_cookie_secret").read_text().strip()
    text = hub.log.read_text(errors="replace")
    assert "User logged in: alice" in text and "Spawning" in text
    leaked = [f"secret #{i}" for i, v in enumerate(sorted(hub.secrets | {cookie_secret})) if v in text]
    assert not leaked, f"{len(leaked)} of {len(hub.secrets) + 1} secrets appear in the hub's log"
    scan = notebook.kernel.check(KERNEL_SCAN.format(log=str(hub.log))).json_lines()[-1]
    assert scan["secrets"] >= 1 and scan["leaked"] == 0, scan


KERNEL_UNTIL_CHANGE_OR_ERROR = """
import time
_t0 = s.identity.token(); _start = time.time(); _now = _t0; _err = None
while _now == _t0 and time.time() - _start < {limit}:
    time.sleep(0.5)
    try:
        _now = s.identity.token()
    except Exception as e:
        _err = type(e).__name__ + ": " + str(e)[:400]
        break
print(json.dumps({{"before": h(_t0), "after": h(_now), "error": _err}}))
"""


def test_removed_from_the_allowed_group_the_hub_stops_refreshing_her_tokens(kc_hub: KcHub, notebook: Notebook) -> None:
    """Attack: alice, removed from ``analysts`` (the hub's ``allowed_groups``) in Keycloak, keeps her hub session
    and kernel. JupyterHub checks ``allowed_groups`` at login only; without a check on refresh the hub kept
    fetching her fresh tokens (now without the group) and her kernel kept acting as her at the catalog for as
    long as her Keycloak session lived. Now the hub refuses the refresh: her last token runs out within one
    lifetime and her kernel's next token request fails. Runs last: alice's login ends here."""
    hub, kc, kernel = kc_hub.hub, kc_hub.kc, notebook.kernel
    kc.remove_from_group("alice", "analysts")
    before = hub.auth_state("alice")
    code = KERNEL_UNTIL_CHANGE_OR_ERROR.format(limit=TOKEN_TTL + 15)
    out = kernel.check(code, timeout=TOKEN_TTL + 180).json_lines()[-1]
    after = hub.auth_state("alice")
    assert out["before"] == out["after"] and after["access_token"] == before["access_token"], (
        "the hub refreshed the tokens of a user no longer in allowed_groups: "
        f"{after['oauth_user'].get('groups')} (kernel: {out})"
    )
    assert out["error"] and out["error"].startswith("TokenRefreshError"), out  # her last token ran out
    assert "has not refreshed the user's token" in out["error"], out
    assert "no longer allowed" in hub.log.read_text(errors="replace"), tail(hub.log)
    assert "analysts" in (after["oauth_user"].get("groups") or [])  # the state of her last allowed login
