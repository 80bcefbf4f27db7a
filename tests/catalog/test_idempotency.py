"""``Idempotency-Key`` on the reference catalog: real HTTP on loopback, on SQLite and PostgreSQL.

A retry with the same key is answered from the stored outcome and applied once; the key is the
caller's own (another principal can neither replay nor read it); reusing a key for another request
is refused; deterministic client errors replay; keys expire and are purged.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from lakesession.reference import ReferenceCatalog, idempotency, store
from tests.conftest import BACKENDS, bearer, catalog_on

P = "/v1/lakesession"
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


@pytest.fixture(scope="module", params=BACKENDS)
def catalog(
    request: pytest.FixtureRequest, catalog: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReferenceCatalog]:
    yield from catalog_on(request.param, catalog, tmp_path_factory, "idem")


@pytest.fixture(scope="module")
def http(catalog: ReferenceCatalog) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=catalog.uri, timeout=30) as client:
        yield client


def key() -> str:
    return str(uuid.uuid4())


def _ns(http: httpx.Client, catalog: ReferenceCatalog) -> str:
    ns = f"idem_{uuid.uuid4().hex[:8]}"
    r = http.post(f"{P}/namespaces", json={"namespace": [ns]}, headers=bearer(catalog, "etl"))
    assert r.status_code == 200, r.text
    return ns


def _table(http: httpx.Client, catalog: ReferenceCatalog) -> tuple[str, str]:
    ns = _ns(http, catalog)
    r = http.post(f"{P}/namespaces/{ns}/tables", json={"name": "t", "schema": SCHEMA}, headers=bearer(catalog, "etl"))
    assert r.status_code == 200, r.text
    return ns, f"{P}/namespaces/{ns}/tables/t"


def _set(prop: str, value: str) -> dict[str, Any]:
    return {"requirements": [], "updates": [{"action": "set-properties", "updates": {prop: value}}]}


def _metadata_files(http: httpx.Client, catalog: ReferenceCatalog, path: str) -> int:
    meta = http.get(path, headers=bearer(catalog, "etl")).json()["metadata"]
    return len(meta.get("metadata-log") or []) + 1


def test_config_advertises_the_key_lifetime(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    r = http.get("/v1/config", headers=bearer(catalog, "etl"))
    assert r.json()["idempotency-key-lifetime"] == "PT30M"


def test_a_retried_commit_is_applied_once_and_answered_the_same(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    _, path = _table(http, catalog)
    h = {**bearer(catalog, "etl"), "Idempotency-Key": key()}
    before = _metadata_files(http, catalog, path)
    first = http.post(path, json=_set("a", "1"), headers=h)
    assert first.status_code == 200, first.text
    again = http.post(path, json=_set("a", "1"), headers=h)
    assert again.status_code == 200 and again.headers.get("idempotent-replayed") == "true"
    assert again.content == first.content
    assert _metadata_files(http, catalog, path) == before + 1  # one commit, not two
    # without a key the same request is applied again: that is the duplication the key prevents
    assert http.post(path, json=_set("a", "1"), headers=bearer(catalog, "etl")).status_code == 200
    assert _metadata_files(http, catalog, path) == before + 2


def test_a_key_reused_for_another_request_is_refused(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    _, path = _table(http, catalog)
    h = {**bearer(catalog, "etl"), "Idempotency-Key": key()}
    assert http.post(path, json=_set("a", "1"), headers=h).status_code == 200
    r = http.post(path, json=_set("a", "2"), headers=h)
    assert r.status_code == 400 and "different request" in r.json()["error"]["message"]
    props = http.get(path, headers=bearer(catalog, "etl")).json()["metadata"]["properties"]
    assert props["a"] == "1"


def test_another_principal_cannot_replay_or_read_an_outcome(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    """Attack: alice (read-only on nothing here) replays etl's key and body to get its stored answer."""
    _, path = _table(http, catalog)
    k = key()
    owner = http.post(path, json=_set("secret", "s3://x"), headers={**bearer(catalog, "etl"), "Idempotency-Key": k})
    assert owner.status_code == 200
    for who in ("alice", "bob"):
        r = http.post(path, json=_set("secret", "s3://x"), headers={**bearer(catalog, who), "Idempotency-Key": k})
        assert r.status_code == 403, r.text
        assert "idempotent-replayed" not in r.headers and "metadata" not in r.text
        # nor by a different request under the victim's key (would confirm the key exists): same 403
        r = http.post(path, json=_set("other", "1"), headers={**bearer(catalog, who), "Idempotency-Key": k})
        assert r.status_code == 403
    again = http.post(path, json=_set("secret", "s3://x"), headers={**bearer(catalog, "etl"), "Idempotency-Key": k})
    assert again.headers.get("idempotent-replayed") == "true" and again.content == owner.content


def test_a_deterministic_client_error_is_replayed(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    ns, path = _table(http, catalog)
    h = {**bearer(catalog, "etl"), "Idempotency-Key": key()}
    body = {"name": "t", "schema": SCHEMA}
    first = http.post(f"{P}/namespaces/{ns}/tables", json=body, headers=h)
    assert first.status_code == 409
    assert http.delete(path, headers=bearer(catalog, "etl")).status_code == 204
    again = http.post(f"{P}/namespaces/{ns}/tables", json=body, headers=h)  # would succeed now: the 409 is final
    assert again.status_code == 409 and again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()
    assert http.get(path, headers=bearer(catalog, "etl")).status_code == 404


def test_forbidden_is_not_final(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    ns = _ns(http, catalog)
    k = key()
    body = {"namespace": [ns, "child"]}
    assert (
        http.post(f"{P}/namespaces", json=body, headers={**bearer(catalog, "bob"), "Idempotency-Key": k}).status_code
        == 403
    )
    assert catalog.services is not None
    with catalog.services.catalog.engine.connect() as conn:
        assert conn.execute(select(store.idempotency.c.key).where(store.idempotency.c.key == k)).first() is None


def test_mutations_of_every_kind_replay(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    etl = bearer(catalog, "etl")
    ns = f"idem_{uuid.uuid4().hex[:8]}"

    def twice(method: str, url: str, **kw: Any) -> httpx.Response:
        h = {**etl, "Idempotency-Key": key()}
        first = http.request(method, url, headers=h, **kw)
        assert first.status_code in (200, 204), (method, url, first.text)
        again = http.request(method, url, headers=h, **kw)
        assert again.status_code == first.status_code and again.headers.get("idempotent-replayed") == "true"
        if first.status_code == 200:
            a, b = first.json(), again.json()
            a.pop("config", None), b.pop("config", None)
            assert a == b, url
        return again

    twice("POST", f"{P}/namespaces", json={"namespace": [ns], "properties": {"x": "1"}})
    twice("POST", f"{P}/namespaces/{ns}/properties", json={"updates": {"y": "2"}, "removals": ["x"]})
    twice("POST", f"{P}/namespaces/{ns}/tables", json={"name": "t", "schema": SCHEMA})
    twice(
        "POST",
        f"{P}/tables/rename",
        json={"source": {"namespace": [ns], "name": "t"}, "destination": {"namespace": [ns], "name": "u"}},
    )
    twice("DELETE", f"{P}/namespaces/{ns}/tables/u")
    view = {
        "name": "v",
        "schema": SCHEMA,
        "view-version": {
            "version-id": 1,
            "timestamp-ms": int(time.time() * 1000),
            "schema-id": 0,
            "summary": {},
            "representations": [{"type": "sql", "sql": "select 1 as id", "dialect": "spark"}],
            "default-namespace": [ns],
        },
        "properties": {},
    }
    twice("POST", f"{P}/namespaces/{ns}/views", json=view)
    twice("POST", f"{P}/namespaces/{ns}/views/v", json=_set("p", "1"))
    twice(
        "POST",
        f"{P}/views/rename",
        json={"source": {"namespace": [ns], "name": "v"}, "destination": {"namespace": [ns], "name": "w"}},
    )
    twice("DELETE", f"{P}/namespaces/{ns}/views/w")
    twice("DELETE", f"{P}/namespaces/{ns}")
    assert http.get(f"{P}/namespaces/{ns}", headers=etl).status_code == 404


def test_a_malformed_key_is_a_clear_400(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    r = http.post(
        f"{P}/namespaces", json={"namespace": ["x"]}, headers={**bearer(catalog, "etl"), "Idempotency-Key": "abc"}
    )
    assert r.status_code == 400 and "UUID" in r.json()["error"]["message"]


def test_expired_keys_are_forgotten_and_purged(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    _, path = _table(http, catalog)
    k = key()
    h = {**bearer(catalog, "etl"), "Idempotency-Key": k}
    assert http.post(path, json=_set("a", "1"), headers=h).status_code == 200
    engine = catalog.services.catalog.engine
    t = store.idempotency
    with engine.begin() as conn:
        row = conn.execute(select(t.c.created_at, t.c.expires_at).where(t.c.key == k)).one()
        assert row.expires_at - row.created_at >= idempotency.LIFETIME_SECONDS  # never before the advertised lifetime
        conn.execute(update(t).where(t.c.key == k).values(expires_at=time.time() - 1))
    r = http.post(path, json=_set("a", "2"), headers=h)  # the key is free again: a new request
    assert r.status_code == 200 and "idempotent-replayed" not in r.headers
    with engine.begin() as conn:
        conn.execute(update(t).where(t.c.key == k).values(expires_at=time.time() - 1))
    assert idempotency.purge(engine) >= 1
    with engine.connect() as conn:
        assert conn.execute(select(t.c.key).where(t.c.key == k)).first() is None


def test_concurrent_requests_with_one_key_apply_once(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    _, path = _table(http, catalog)
    before = _metadata_files(http, catalog, path)
    h = {**bearer(catalog, "etl"), "Idempotency-Key": key()}
    statuses: list[int] = []

    def send() -> None:
        with httpx.Client(base_url=catalog.uri, timeout=30) as c:
            statuses.append(c.post(path, json=_set("c", "1"), headers=h).status_code)

    threads = [threading.Thread(target=send) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert set(statuses) <= {200, 503} and 200 in statuses, statuses
    assert _metadata_files(http, catalog, path) == before + 1
    assert http.post(path, json=_set("c", "1"), headers=h).status_code == 200


def test_the_outcome_row_commits_with_the_mutation(http: httpx.Client, catalog: ReferenceCatalog) -> None:
    """A mutation that fails after its key's row would have been written leaves neither behind."""
    _, path = _table(http, catalog)
    k = key()
    stale = {
        "requirements": [{"type": "assert-table-uuid", "uuid": str(uuid.uuid4())}],
        "updates": _set("a", "1")["updates"],
    }
    r = http.post(path, json=stale, headers={**bearer(catalog, "etl"), "Idempotency-Key": k})
    assert r.status_code == 409
    t = store.idempotency
    with catalog.services.catalog.engine.connect() as conn:
        row = conn.execute(select(t.c.status, t.c.body).where(t.c.key == k)).one()
    assert row.status == 409 and json.loads(row.body)["error"]["type"] == "CommitFailedException"
