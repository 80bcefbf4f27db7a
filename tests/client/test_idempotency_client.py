"""The client half's ``Idempotency-Key``: pyiceberg (``lakesession.catalog.rest_catalog``) and the gateway
add a key to each mutation and, when the catalog advertises key support, retry a dropped mutation
with that same key. A loopback HTTP server drops the first attempt's connection without answering
(what a catalog killed after saving a commit looks like to the client)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests

from lakesession._idempotency import advertises_keys, is_mutation, new_key
from lakesession.catalog import rest_catalog
from lakesession.gateway import Gateway
from tests._stub import QuietHandler, StubServer


class Flaky:
    """A catalog on loopback whose first answer to each mutation is a dropped connection."""

    def __init__(self, advertise: bool):
        self.advertise = advertise
        self.posts: list[dict[str, str]] = []
        flaky = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                doc: dict[str, Any] = {"defaults": {}, "overrides": {}}
                if flaky.advertise:
                    doc["idempotency-key-lifetime"] = "PT30M"
                self.reply(200, doc)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                flaky.posts.append({k.lower(): v for k, v in self.headers.items()})
                if len(flaky.posts) == 1:  # "saved", then died before answering
                    self.close_connection = True
                    self.connection.close()
                    return
                self.reply(200, {"namespace": ["a"], "properties": {}})

        self.server = StubServer(Handler)
        self.uri = self.server.url

    def close(self) -> None:
        self.server.close()


@pytest.fixture(params=[True, False], ids=["advertised", "not-advertised"])
def flaky(request: pytest.FixtureRequest) -> Iterator[Flaky]:
    f = Flaky(request.param)
    yield f
    f.close()


class _Static:
    def token(self) -> str:
        return "t"


def test_keys_are_uuidv7_and_time_ordered() -> None:
    keys = [new_key() for _ in range(50)]
    assert all(uuid.UUID(k).version == 7 and uuid.UUID(k).variant == uuid.RFC_4122 and len(k) == 36 for k in keys)
    assert len(set(keys)) == 50
    assert [k[:13] for k in keys] == sorted(k[:13] for k in keys)  # the millisecond prefix never goes back


def test_what_counts_as_a_mutation() -> None:
    assert is_mutation("POST", "/v1/p/namespaces/a/tables/t")
    assert is_mutation("DELETE", "/v1/p/namespaces/a")
    assert is_mutation("POST", "/v1/p/tables/rename")
    assert not is_mutation("GET", "/v1/p/namespaces/a/tables/t")
    assert not is_mutation("POST", "/v1/p/namespaces/a/tables/t/metrics")
    assert not is_mutation("POST", "/v1/oauth/tokens")
    assert not is_mutation("POST", "/v1/p/namespaces/a/tables/t/sign")
    assert advertises_keys(b'{"idempotency-key-lifetime": "PT30M"}') and not advertises_keys(b"{}")


def test_pyiceberg_retries_a_dropped_mutation_with_the_same_key(flaky: Flaky) -> None:
    catalog = rest_catalog("flaky", flaky.uri, _Static())
    assert catalog.key_support.supported is flaky.advertise
    if not flaky.advertise:  # the spec: without the lifetime, assume no key support: never retry
        with pytest.raises(requests.exceptions.ConnectionError):
            catalog.create_namespace("a")
        assert len(flaky.posts) == 1 and uuid.UUID(flaky.posts[0]["idempotency-key"]).version == 7
        return
    catalog.create_namespace("a")
    assert len(flaky.posts) == 2
    assert flaky.posts[0]["idempotency-key"] == flaky.posts[1]["idempotency-key"]
    catalog.create_namespace("b")  # a new operation gets a new key
    assert flaky.posts[2]["idempotency-key"] != flaky.posts[0]["idempotency-key"]


def test_gateway_adds_a_key_and_retries_with_it(flaky: Flaky) -> None:
    with Gateway(flaky.uri, lambda: "t") as gw, httpx.Client(base_url=gw.uri, timeout=60) as jvm:
        auth = {"Authorization": f"Bearer {gw.secret}"}
        assert jvm.get("/v1/config", headers=auth).status_code == 200
        r = jvm.post("/v1/namespaces", json={"namespace": ["a"]}, headers=auth)
        if not flaky.advertise:
            assert r.status_code == 504 and len(flaky.posts) == 1  # outcome unknown: said so, not retried
            assert uuid.UUID(flaky.posts[0]["idempotency-key"]).version == 7
            return
        assert r.status_code == 200, r.text
        assert len(flaky.posts) == 2 and flaky.posts[0]["idempotency-key"] == flaky.posts[1]["idempotency-key"]
        own = str(uuid.uuid4())  # Iceberg >= 1.11 sends its own key: forwarded as it is
        assert (
            jvm.post("/v1/namespaces", json={"namespace": ["b"]}, headers={**auth, "Idempotency-Key": own}).status_code
            == 200
        )
        assert flaky.posts[-1]["idempotency-key"] == own
