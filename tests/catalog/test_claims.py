"""Principal and role names read from an IdP's claims (``lakesession.reference.claims``): paths and prefixes."""

from __future__ import annotations

import pytest

from lakesession.reference.claims import principal_name, token_roles
from lakesession.reference.errors import NotAuthorized

KEYCLOAK = {
    "sub": "44e35898-8f7f-4b33-ac62-c6607fe3440b",
    "preferred_username": "alice",
    "groups": ["/analysts", "/org/etl", "admins"],
    "realm_access": {"roles": ["offline_access", "analysts"]},
    "https://example.com/groups": ["stewards"],
}


def test_a_principal_from_a_claim_or_a_path() -> None:
    assert principal_name(KEYCLOAK, "preferred_username") == "alice"
    assert principal_name({"ext": {"user": "bob"}}, "ext.user") == "bob"
    assert principal_name({"a.b": "exact", "a": {"b": "nested"}}, "a.b") == "exact"  # an exact name wins
    with pytest.raises(NotAuthorized, match="'realm_access.roles' claim is a list"):
        principal_name(KEYCLOAK, "realm_access.roles")
    with pytest.raises(NotAuthorized, match="no 'email' claim"):
        principal_name(KEYCLOAK, "email")
    with pytest.raises(NotAuthorized, match="too long"):
        principal_name({"sub": "x" * 256}, "sub")


def test_roles_from_a_claim_a_path_and_a_prefix() -> None:
    assert token_roles(KEYCLOAK, None) == frozenset()
    assert token_roles(KEYCLOAK, "realm_access.roles") == {"offline_access", "analysts"}
    assert token_roles(KEYCLOAK, "https://example.com/groups") == {"stewards"}
    assert token_roles(KEYCLOAK, "groups", "/") == {"analysts", "org/etl"}  # names without the prefix: not roles
    assert token_roles(KEYCLOAK, "groups") == {"/analysts", "/org/etl", "admins"}
    assert token_roles({"groups": "analysts"}, "groups") == {"analysts"}
    assert token_roles({"groups": {"analysts": True}}, "groups") == frozenset()
    assert token_roles({"groups": ["", "/", None, 3, "x" * 256]}, "groups", "/") == frozenset()
