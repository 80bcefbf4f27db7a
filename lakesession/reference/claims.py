"""Who a token names and which groups it carries, read from configurable claims (an IdP's shape, not ours).

Identity providers put the user's name and groups in different places: Keycloak's ``sub`` is a UUID (the
name is ``preferred_username``), its groups sit in a ``groups`` claim (a mapper's) and its realm roles in
``realm_access.roles``; Entra ID uses ``oid``/``upn`` and ``groups``/``roles``; Okta ``sub``/``groups``.
So both are settings: ``principal_claim`` and ``roles_claim``, each a claim name or a dotted path into
nested objects. A claim whose own name contains dots (``https://example.com/groups``) is found by that
exact name first; otherwise the name is split at dots and followed through objects, never into lists.
"""

from __future__ import annotations

from typing import Any

from .errors import NotAuthorized

_MAX_NAME = 255
_MISSING = object()


def claim_at(claims: dict[str, Any], path: str) -> Any:
    """The value at ``path`` (an exact top-level name, else a dotted path through objects); ``_MISSING`` if none."""
    if path in claims:
        return claims[path]
    node: Any = claims
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if value == "":
        return "an empty string"
    return "not a string"


def principal_name(claims: dict[str, Any], path: str) -> str:
    """The principal the token names at ``path``; a 401 that says what is wrong and which setting to fix."""
    value = claim_at(claims, path)
    if isinstance(value, str) and value and len(value) <= _MAX_NAME:
        return value
    if value is _MISSING or value is None:
        raise NotAuthorized(
            f"Token has no {path!r} claim naming a principal (the catalog's principal_claim): "
            "make the identity provider add it, or set principal_claim to the claim that names users"
        )
    what = "too long" if isinstance(value, str) and value else _kind(value)
    raise NotAuthorized(
        f"Token's {path!r} claim is {what}, not one principal name: set principal_claim to a claim holding "
        "one name (e.g. preferred_username)"
    )


def token_roles(claims: dict[str, Any], path: str | None, prefix: str = "") -> frozenset[str]:
    """The role names the token's ``path`` claim carries (a list of strings, or one string), ``prefix`` stripped.

    With a ``prefix`` (``/`` for Keycloak's full group paths), names without it are not roles and are skipped.
    Anything that is not a string is skipped. How many names there can be is bounded by the token's own size
    limit (16 KB, ``_wire.jwks``); they only ever narrow down to roles the catalog declares (``Directory.token_access``)."""
    if not path:
        return frozenset()
    value = claim_at(claims, path)
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    names: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            continue
        if prefix:
            if not item.startswith(prefix):
                continue
            item = item[len(prefix) :]
        if item and len(item) <= _MAX_NAME:
            names.add(item)
    return frozenset(names)
