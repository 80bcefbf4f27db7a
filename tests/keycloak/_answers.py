"""Keycloak's real error answers, provoked over HTTP, and their recording (``tests/fixtures/recordings``).

``provoke(kc)`` asks a running Keycloak (``tests/_keycloak.py``, a copy of realm ``lake``) for each answer the client
must turn into one line; ``tests/keycloak/test_keycloak_login.py`` checks them against the recording on every
run of the ``keycloak`` group, and the fast doubles (``tests/client/test_keycloak_answers.py``) replay the
recording. Rewrite it after a Keycloak upgrade with ``python -m tests.keycloak._answers`` (starts one).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from tests._keycloak import VERSION, Keycloak
from tests.keycloak._form import approve

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / f"keycloak-{VERSION}.json"
HEADERS = ("content-type", "cache-control", "pragma", "www-authenticate", "retry-after")  # the ones that matter
CLI = "lakesession-cli"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS = "urn:ietf:params:oauth:token-type:access_token"


def answer(request: str, resp: httpx.Response) -> dict[str, Any]:
    """What a recording keeps of one answer: the request (described), status, the headers that matter, body."""
    return {
        "request": request,
        "status": resp.status_code,
        "headers": {k: resp.headers[k] for k in HEADERS if k in resp.headers},
        "body": resp.json(),
    }


def provoke(kc: Keycloak) -> dict[str, dict[str, Any]]:
    """Each recorded answer, asked of ``kc`` now (changes the realm's settings only for as long as needed)."""
    issuer = f"{kc.issuer}/protocol/openid-connect"
    token, device = f"{issuer}/token", f"{issuer}/auth/device"
    out: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=30) as http:
        out["device_authorization_without_pkce"] = answer(
            f"POST {device} client_id={CLI} scope=openid (the client requires PKCE S256; no code_challenge)",
            http.post(device, data={"client_id": CLI, "scope": "openid"}),
        )
        verifier = generate_token(64)
        challenge = {"code_challenge": create_s256_code_challenge(verifier), "code_challenge_method": "S256"}
        grant = http.post(device, data={"client_id": CLI, "scope": "openid", **challenge}).json()
        poll = {"grant_type": DEVICE_GRANT, "client_id": CLI, "device_code": grant["device_code"]}
        out["device_poll_pending"] = answer(
            f"POST {token} grant_type=device_code (with code_verifier) before the user approved",
            http.post(token, data={**poll, "code_verifier": verifier}),
        )
        approve(grant["verification_uri_complete"], "bob", kc.passwords["bob"])
        time.sleep(float(grant.get("interval", 5)) + 0.2)
        out["device_poll_wrong_verifier"] = answer(
            f"POST {token} grant_type=device_code after the user approved, with a code_verifier that is not "
            "the challenge's",
            http.post(token, data={**poll, "code_verifier": generate_token(64)}),
        )
        out["client_credentials_bad_secret"] = answer(
            f"POST {token} grant_type=client_credentials, HTTP Basic etl:<wrong secret>",
            http.post(token, data={"grant_type": "client_credentials"}, auth=("etl", "not-the-secret")),
        )
        subject = kc.client_token("etl")  # its aud names lakesession only, not engine
        out["token_exchange_not_in_audience"] = answer(
            f"POST {token} grant_type=token-exchange (standard, v2) as client engine, subject_token = a token "
            "whose aud does not name engine",
            http.post(
                token,
                data={"grant_type": EXCHANGE_GRANT, "subject_token": subject, "subject_token_type": ACCESS},
                auth=("engine", kc.client_secrets["engine"]),
            ),
        )
        out["refresh_garbage"] = answer(
            f"POST {token} grant_type=refresh_token client_id={CLI} refresh_token=<not a token>",
            http.post(token, data={"grant_type": "refresh_token", "client_id": CLI, "refresh_token": "not-a-token"}),
        )
        grant = kc.password_grant("bob")
        r = kc.admin("POST", f"/users/{kc.user_id('bob')}/logout", timeout=30)
        assert r.status_code == 204, r.text
        out["refresh_session_not_active"] = answer(
            f"POST {token} grant_type=refresh_token client_id={CLI}, after the admin API logged the user out "
            "(POST /admin/realms/lake/users/<id>/logout)",
            http.post(
                token, data={"grant_type": "refresh_token", "client_id": CLI, "refresh_token": grant["refresh_token"]}
            ),
        )
        with session_idle(kc, 2):
            grant = kc.password_grant("bob")
            time.sleep(3.5)
            out["refresh_token_not_active"] = answer(
                f"POST {token} grant_type=refresh_token client_id={CLI}, after the SSO session's idle timeout "
                "(realm ssoSessionIdleTimeout) passed",
                http.post(
                    token,
                    data={"grant_type": "refresh_token", "client_id": CLI, "refresh_token": grant["refresh_token"]},
                ),
            )
    for one in out.values():  # the port changes with every start, the realm's name with every test module
        one["request"] = (
            one["request"].replace(kc.base, "http://<keycloak>").replace(f"/realms/{kc.realm}/", "/realms/lake/")
        )
    return out


class session_idle:
    """The realm's SSO session idle timeout set to ``seconds`` for a block (its old value put back after)."""

    def __init__(self, kc: Keycloak, seconds: int) -> None:
        self.kc, self.seconds, self.old = kc, seconds, 0

    def __enter__(self) -> None:
        realm = self.kc.admin("GET", "", timeout=30).json()
        self.old = int(realm.get("ssoSessionIdleTimeout") or 1800)
        self._put(self.seconds)

    def __exit__(self, *exc: object) -> None:
        self._put(self.old)

    def _put(self, seconds: int) -> None:
        r = self.kc.admin("PUT", "", json={"ssoSessionIdleTimeout": seconds}, timeout=30)
        assert r.status_code == 204, r.text


def recorded() -> dict[str, dict[str, Any]]:
    """The recorded answers (name -> request, status, headers, body)."""
    return dict(json.loads(RECORDING.read_text())["answers"])


def write(answers: dict[str, dict[str, Any]]) -> None:
    doc = {
        "source": (
            f"Keycloak {VERSION} (org.keycloak:keycloak-quarkus-dist:{VERSION}:zip from Maven Central), "
            "`kc.sh start --optimized` on loopback with docs/how-to/keycloak/lake-realm.json imported "
            "(tests/_keycloak.py); asked by tests/keycloak/_answers.py, which the keycloak test group re-checks."
        ),
        "answers": answers,
    }
    RECORDING.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":  # python -m tests.keycloak._answers: start Keycloak, record, stop
    from tests._keycloak import keycloak

    with tempfile.TemporaryDirectory() as tmp, keycloak(Path(tmp)) as kc:
        write(provoke(kc))
    print(f"wrote {RECORDING}", file=sys.stderr)
