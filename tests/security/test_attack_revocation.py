"""Revocation on the next request (issue 23, finding 4), attacked over real HTTP on loopback.

An authorization code replayed (leaked with its verifier) revokes the sign-in session it started. An
access token of that session which the catalog had already verified (and cached) must be refused on
the next request: on the replica that saw the replay at once, and on another replica sharing the
database within the revocation generation's cache (1 s), never after the token cache's 60 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lakesession.reference import ReferenceCatalog, start
from lakesession.reference import bootstrap as bootstrap_mod
from tests.catalog.test_authcode import CLIENTS, get_code, params, pkce, redeem
from tests.conftest import BOOTSTRAP


def catalog_status(base: str, access_token: str) -> int:
    """What the token buys at one replica (its own address, not the shared public URL)."""
    r = httpx.get(
        f"{base}/v1/config",
        params={"warehouse": "lakesession"},
        headers={"Authorization": f"Bearer {access_token}"},
        timeout=30,
    )
    return r.status_code


def sign_in_session(cat: ReferenceCatalog) -> tuple[str, str, dict[str, str]]:
    verifier, challenge = pkce()
    code = get_code(cat, params(challenge))
    first = redeem(cat, code, verifier)
    assert first.status_code == 200, first.text
    return code, verifier, first.json()


def test_replayed_code_revokes_a_token_the_catalog_already_cached(catalog: ReferenceCatalog) -> None:
    catalog.admin.apply_bootstrap(bootstrap_mod.parse(CLIENTS))
    code, verifier, tokens = sign_in_session(catalog)
    access = tokens["access_token"]
    for _ in range(3):  # verified once, then served from the catalog's token cache
        assert catalog_status(catalog.bind_url, access) == 200
    replay = redeem(catalog, code, verifier)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert catalog_status(catalog.bind_url, access) == 401  # fa6e17e: 200 for up to 60 s more


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[ReferenceCatalog, ReferenceCatalog]]:
    """Two replicas sharing one data dir (SQLite database and issuer key) and one public URL (A's)."""
    policy = BOOTSTRAP.parse()
    a = start(data_dir=tmp_path, bootstrap=policy)
    try:
        b = start(data_dir=tmp_path, base_url=a.uri)
    except BaseException:
        a.stop()
        raise
    a.admin.apply_bootstrap(bootstrap_mod.parse(CLIENTS))
    yield a, b
    b.stop()
    a.stop()


def test_revocation_reaches_the_other_replica_within_a_second(
    replicas: tuple[ReferenceCatalog, ReferenceCatalog],
) -> None:
    a, b = replicas
    code, verifier, tokens = sign_in_session(a)
    access = tokens["access_token"]
    assert catalog_status(b.bind_url, access) == 200  # B verified and cached it
    assert catalog_status(b.bind_url, access) == 200
    assert redeem(a, code, verifier).status_code == 400  # the replay lands on A
    assert catalog_status(a.bind_url, access) == 401  # A: at once
    time.sleep(1.2)  # B re-reads the shared revocation generation at most every second
    assert catalog_status(b.bind_url, access) == 401  # fa6e17e: 200 until B's cache entry ages out (60 s)
    assert catalog_status(b.bind_url, a.admin.token_for("etl")) == 200  # other sessions are untouched
