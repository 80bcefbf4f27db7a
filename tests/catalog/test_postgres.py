"""Two `lakesession serve` processes on one PostgreSQL database: concurrent commits to one table end in
one success and a 409 ``CommitFailedException``, never a lost update."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests._pg import new_database
from tests._serve import Served

P = "/v1/lakesession"
POLICY = """\
principals:
  - {name: etl, type: service, client_secret: etl-pw-7}
roles:
  - {name: eng, members: [etl]}
grants:
  - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Two catalog processes sharing the database, the warehouse and the data dir (issuer key, admin secret)."""
    base = tmp_path_factory.mktemp("pg-pair")
    cfg = base / "serve.yaml"
    cfg.write_text(
        f"port: 0\ndb_url: {new_database('pair')}\nwarehouse: {(base / 'wh').as_uri()}\n"
        f"bootstrap:\n" + "".join(f"  {line}\n" for line in POLICY.splitlines())
    )
    (base / "wh").mkdir()
    args = ["--config", str(cfg), "--data-dir", str(base / "d")]
    first = Served(args)  # the first start creates the issuer key; the second reuses it
    second = Served(args)
    yield first, second
    first.stop()
    second.stop()


def race_each(
    pair: tuple[Served, Served], tokens: tuple[str, str], table: str, bodies: tuple[dict[str, Any], dict[str, Any]]
) -> list[httpx.Response]:
    """POST both commits at the same instant, one to each process; the responses in the order of ``bodies``."""
    out: dict[int, httpx.Response] = {}
    go = threading.Barrier(2)

    def commit(i: int) -> None:
        go.wait()
        out[i] = httpx.post(
            f"{pair[i].uri}{P}/namespaces/pg/tables/{table}",
            json=bodies[i],
            headers={"Authorization": f"Bearer {tokens[i]}"},
            timeout=60,
        )

    threads = [threading.Thread(target=commit, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return [out[0], out[1]]


def race(
    pair: tuple[Served, Served], tokens: tuple[str, str], table: str, bodies: tuple[dict[str, Any], dict[str, Any]]
) -> list[int]:
    """Both commits rest on the same base: one 200 and one 409 CommitFailedException."""
    out = race_each(pair, tokens, table, bodies)
    for r in out:
        assert r.status_code in (200, 409), r.text
        if r.status_code == 409:
            assert r.json()["error"]["type"] == "CommitFailedException"
    return sorted(r.status_code for r in out)


@pytest.mark.slow
def test_concurrent_commits_from_two_processes(pair: tuple[Served, Served]) -> None:
    a, b = pair
    tokens = (a.token("etl", "etl-pw-7"), b.token("etl", "etl-pw-7"))  # each its own issuer URL (no proxy here)
    h = {"Authorization": f"Bearer {tokens[0]}"}
    hb = {"Authorization": f"Bearer {tokens[1]}"}
    assert httpx.post(f"{b.uri}{P}/namespaces", json={"namespace": ["pg"]}, headers=hb).status_code == 200
    fields = [{"id": 1, "name": "id", "type": "long", "required": False}]
    r = httpx.post(
        f"{a.uri}{P}/namespaces/pg/tables",
        json={"name": "t", "schema": {"type": "struct", "schema-id": 0, "fields": fields}},
        headers=h,
    )
    assert r.status_code == 200, r.text

    # 1) both commits are based on the same schema: exactly one may win each round
    for round_ in range(6):
        meta = httpx.get(f"{a.uri}{P}/namespaces/pg/tables/t", headers=h).json()["metadata"]
        current, last = meta["current-schema-id"], meta["last-column-id"]
        bodies = tuple(
            {
                "requirements": [{"type": "assert-current-schema-id", "current-schema-id": current}],
                "updates": [
                    {
                        "action": "add-schema",
                        "schema": {
                            "type": "struct",
                            "schema-id": current + 1,
                            "fields": [
                                *next(s for s in meta["schemas"] if s["schema-id"] == current)["fields"],
                                {"id": last + 1, "name": f"c{round_}_{side}", "type": "string", "required": False},
                            ],
                        },
                        "last-column-id": last + 1,
                    },
                    {"action": "set-current-schema", "schema-id": -1},
                ],
            }
            for side in ("a", "b")
        )
        assert race(pair, tokens, "t", bodies) == [200, 409]  # type: ignore[arg-type]
    meta = httpx.get(f"{b.uri}{P}/namespaces/pg/tables/t", headers=hb).json()["metadata"]
    assert len(meta["schemas"]) == 7 and meta["current-schema-id"] == 6

    # 2) no requirements at all: both may succeed one after the other, but a commit answered 200 is never lost
    won: list[str] = []
    for round_ in range(8):
        keys = (f"k{round_}a", f"k{round_}b")
        bodies = tuple(
            {"requirements": [], "updates": [{"action": "set-properties", "updates": {k: "1"}}]} for k in keys
        )
        for key, resp in zip(keys, race_each(pair, tokens, "t", bodies), strict=True):  # type: ignore[arg-type]
            assert resp.status_code in (200, 409), resp.text
            if resp.status_code == 200:
                won.append(key)
    final = httpx.get(f"{a.uri}{P}/namespaces/pg/tables/t", headers=h).json()["metadata"]["properties"]
    assert won and [k for k in won if k not in final] == [], (won, final)
