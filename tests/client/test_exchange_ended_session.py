"""Keycloak's answer to exchanging a token whose sign-in session ended reaches the user as "log in again".

Keycloak 26.7.3's standard token exchange answers a subject token of a logged-out session with 400
``{"error": "invalid_request", "error_description": "Invalid token"}`` (seen by
``tests/keycloak/test_keycloak_engine.py`` after an admin logout), not ``invalid_grant``. A loopback token
endpoint replays that answer; the engine's ``TokenExchange`` must ask for a new login, once it has asked
the subject for a fresher token (which the engine's ``PresentedToken`` refuses: the user must send one).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lakesession.engine._users import PresentedToken
from lakesession.errors import IdentityError, LoginRequiredError
from lakesession.identity._flows import TokenExchange
from tests._stub import QuietHandler, StubServer

ANSWER = {"error": "invalid_request", "error_description": "Invalid token"}
SUBJECT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSIsImV4cCI6NDEwMjQ0NDgwMH0.c2ln"  # exp 2100, not verified here


class _Keycloak(QuietHandler):
    calls = 0

    def do_POST(self) -> None:
        type(self).calls += 1
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.reply(400, ANSWER)


@pytest.fixture
def token_url() -> Iterator[str]:
    _Keycloak.calls = 0
    with StubServer(_Keycloak) as server:
        yield f"{server.url}/realms/lake/protocol/openid-connect/token"


def test_an_ended_session_asks_the_user_to_log_in_again(token_url: str) -> None:
    exchange = TokenExchange(token_url, PresentedToken(SUBJECT), "engine", "engine-secret")
    with pytest.raises(IdentityError) as refused:
        exchange.token()
    assert isinstance(refused.value, LoginRequiredError)
    text = str(refused.value)
    assert "\n" not in text.strip() and "log in again" in text, text
    assert "engine-secret" not in text and SUBJECT not in text
    assert _Keycloak.calls == 1  # asked once; the presented token cannot be renewed by the engine itself
