"""An OAuth ``invalid_scope`` told as what to send instead.

"invalid_scope" alone sends a user hunting: Apache Polaris, for one, refuses every scope but
``PRINCIPAL_ROLE:ALL`` (or ``PRINCIPAL_ROLE:<role>``), and nothing in its error says so. So the
``ScopeError`` names the scope sent and what is expected: from a known catalog's token endpoint
(Polaris: ``…/api/catalog/v1/oauth/tokens``), else from the issuer's OIDC discovery
(``scopes_supported``), looked up at the issuer, or at the token URL's parent paths.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import httpx

from ..errors import ScopeError

POLARIS_TOKEN_PATH = "/api/catalog/v1/oauth/tokens"
POLARIS_SCOPE = "PRINCIPAL_ROLE:ALL"
DISCOVERY_TIMEOUT = 3.0
WELL_KNOWN = "/.well-known/openid-configuration"
_MAX_PARENTS = 3


def _parents(url: str) -> list[str]:
    """``url``'s parent paths, nearest first (``https://h/realms/x/protocol/token`` → …/protocol, …/realms/x, …)."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    out = []
    for n in range(len(segments) - 1, -1, -1):
        out.append(urlunsplit((parts.scheme, parts.netloc, "/" + "/".join(segments[:n]), "", "")).rstrip("/"))
        if len(out) == _MAX_PARENTS:
            break
    return out


def discovered_scopes(token_url: str, issuer: str | None = None) -> tuple[list[str], str] | None:
    """(``scopes_supported``, the issuer that lists them) from OIDC discovery, or None when none answers.

    A document counts only where it names itself the issuer (as ``_discovery.discover`` checks)."""
    candidates = [issuer] if issuer and issuer != token_url else []
    candidates += [p for p in _parents(token_url) if p not in candidates]
    with httpx.Client(timeout=DISCOVERY_TIMEOUT) as http:
        for candidate in candidates:
            try:
                meta = http.get(candidate + WELL_KNOWN, headers={"Accept": "application/json"}).json()
            except (httpx.HTTPError, ValueError):
                continue
            if not isinstance(meta, dict) or str(meta.get("issuer", "")).rstrip("/") != candidate:
                continue
            scopes = meta.get("scopes_supported")
            if isinstance(scopes, list) and scopes:
                return [str(s) for s in scopes], candidate
    return None


def scope_error(detail: str, where: str, sent: str | None, token_url: str, issuer: str | None = None) -> ScopeError:
    """The issuer at ``where`` refused ``sent`` (``detail``: its error): a ``ScopeError`` naming what it expects."""
    said = f"the scope {sent!r}" if sent else "the default scope (none sent)"
    if urlsplit(token_url).path.rstrip("/").endswith(POLARIS_TOKEN_PATH):
        expected = [POLARIS_SCOPE]
        expect = (
            f"This is Apache Polaris's token endpoint, which expects scope {POLARIS_SCOPE!r} "
            "(or 'PRINCIPAL_ROLE:<role name>')"
        )
    elif (found := discovered_scopes(token_url, issuer)) is not None:
        expected, at = found
        expect = f"The issuer's discovery ({at}) lists scopes_supported: {', '.join(expected)}"
    else:
        expected = []
        expect = "The issuer publishes no scopes_supported: ask its operator which scope the catalog's client needs"
    fix = f"connect(..., scope={expected[0]!r})" if expected else "connect(..., scope='<the expected scope>')"
    return ScopeError(
        f"The issuer at {where} refused {said} ({detail}). {expect}. Fix: {fix}.",
        sent=sent,
        expected=expected,
    )
