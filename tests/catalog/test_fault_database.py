"""Fault: the catalog's database goes away for 10 s (issue 17, item 6).

``lakesession serve`` runs on PostgreSQL reached through an :class:`~tests._outlet.Outlet`; the test
cuts it (open connections reset, new ones refused) for 10 s while a client keeps calling. Every answer
during the outage is a 503 ``ErrorModel`` with Retry-After — a client can retry — never a 500; after
it the same server process answers 200 again (stale pooled connections are replaced, no restart).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests._outlet import Outlet
from tests._pg import new_database
from tests._serve import Served

pytestmark = pytest.mark.slow

P = "/v1/lakesession"
POLICY = """\
principals:
  - {name: etl, type: service, client_secret: etl-db-fault-3}
roles:
  - {name: eng, members: [etl]}
grants:
  - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""
OUTAGE = 10.0


@pytest.fixture(scope="module")
def db_behind_outlet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Outlet]]:
    url = httpx.URL(new_database("outage").replace("postgresql+psycopg://", "http://"))
    outlet = Outlet((url.host, url.port or 5432))
    db_url = f"postgresql+psycopg://{url.username}@127.0.0.1:{outlet.port}{url.path}"
    base = tmp_path_factory.mktemp("db-fault")
    (base / "wh").mkdir()
    cfg = base / "serve.yaml"
    cfg.write_text(
        f"port: 0\ndb_url: {db_url}\nwarehouse: {(base / 'wh').as_uri()}\n"
        "bootstrap:\n" + "".join(f"  {line}\n" for line in POLICY.splitlines())
    )
    with Served(["--config", str(cfg), "--data-dir", str(base / "d")]) as served:
        yield served, outlet
    outlet.down()


def _create(served: Served, auth: dict[str, str]) -> None:
    r = httpx.post(f"{served.uri}{P}/namespaces", json={"namespace": ["db"]}, headers=auth, timeout=60)
    assert r.status_code == 200, r.text
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "type": "long", "required": False}]}
    r = httpx.post(
        f"{served.uri}{P}/namespaces/db/tables", json={"name": "t", "schema": schema}, headers=auth, timeout=60
    )
    assert r.status_code == 200, r.text


def _calls(served: Served, auth: dict[str, str]) -> list[tuple[str, httpx.Response]]:
    """One of each kind of call a client makes: load, list, commit, a token request."""
    body: dict[str, Any] = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    with httpx.Client(timeout=60) as c:
        return [
            ("load", c.get(f"{served.uri}{P}/namespaces/db/tables/t", headers=auth)),
            ("list", c.get(f"{served.uri}{P}/namespaces/db/tables", headers=auth)),
            ("commit", c.post(f"{served.uri}{P}/namespaces/db/tables/t", json=body, headers=auth)),
            (
                "token",
                c.post(
                    served.token_endpoint,
                    data={"grant_type": "client_credentials", "scope": "catalog"},
                    auth=("etl", "etl-db-fault-3"),
                ),
            ),
        ]


def test_database_down_for_ten_seconds_is_503_then_recovers_without_restart(
    db_behind_outlet: tuple[Served, Outlet],
) -> None:
    served, outlet = db_behind_outlet
    auth = {"Authorization": f"Bearer {served.token('etl', 'etl-db-fault-3')}"}
    _create(served, auth)
    assert all(r.status_code == 200 for _, r in _calls(served, auth))  # warm: the pool holds open connections

    outlet.down()
    during: list[tuple[str, int]] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < OUTAGE:
            for what, r in _calls(served, auth):
                during.append((what, r.status_code))
                assert r.status_code in (200, 503), f"{what}: {r.status_code} {r.text}"
                if r.status_code == 503:
                    assert r.headers.get("retry-after", "").isdigit(), (what, r.headers)
                    if what == "token":
                        assert r.json().get("error") == "temporarily_unavailable", r.text
                    else:
                        err = r.json()["error"]
                        assert err["code"] == 503 and err["type"] == "ServiceUnavailableException", r.text
                        assert "database" in err["message"], err
            time.sleep(0.5)
    finally:
        outlet.up()
    assert all(s in (200, 503) for _, s in during), during  # a cache may still answer a read; nothing else may
    assert "commit" in {w for w, s in during if s == 503}, during  # a commit cannot succeed without the database

    recovered = time.monotonic()
    after: list[tuple[str, int]] = []
    while time.monotonic() - recovered < 15:
        after = [(what, r.status_code) for what, r in _calls(served, auth)]
        if all(s == 200 for _, s in after):
            break
        assert all(s in (200, 503) for _, s in after), after
        time.sleep(0.5)
    assert all(s == 200 for _, s in after), after
    assert served.proc.poll() is None  # the same process: no restart
    print(f"\nrecovered {time.monotonic() - recovered:.1f} s after the database returned; outage answers: {during[:8]}")
