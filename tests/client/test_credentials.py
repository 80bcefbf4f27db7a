"""Per-table credential store, refresh ahead of expiry, revocation, remote signing — on the S3 emulator.

The emulator enforces session policies and credential expiry with real SigV4, so a
read loop over several TTLs only passes if the FileIO really refreshes its keys.
Unit tests of the refresher use a fake clock and httpx.MockTransport (no sleeping).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lakesession.catalog._tables import SessionTable, create_table, load_table
from lakesession.credentials import (
    FAILED,
    REFRESHING,
    REVOKED,
    VALID,
    CredentialsRefreshError,
    CredentialsRevokedError,
    CredentialStore,
    SigningFileIO,
    VendedFileIO,
    covers,
    refresh_margin,
)
from lakesession.errors import ConfigError
from tests._lake import Lake
from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy

TTL = 4
POLICY = shop_policy("xyz")
SECRET_KEYS = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token")


# -- helpers ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    options = {"warehouse": "s3://lake-bucket/wh", "s3_emulator": True, "credential_ttl": TTL}
    with make_catalog(POLICY, data_dir=tmp_path_factory.mktemp("credcat"), **options) as handle:
        lk = Lake(handle, POLICY.secrets())
        etl = lk.catalogs["etl"]
        etl.create_namespace("shop")
        store = CredentialStore()
        for name in ("orders", "orders_archive", "returns"):
            t = create_table(etl, f"shop.{name}", SCHEMA, store, lk.ids["etl"].token, handle.uri, mode="write")
            assert isinstance(t.io, VendedFileIO)
            t.append(ROWS)
        yield lk


def secrets_of(store: CredentialStore, *tables: str) -> list[str]:
    return [c.config[k] for t in tables for c in store.entry(t).credentials for k in SECRET_KEYS if k in c.config]


def assert_no_secret(text: str, secrets: list[str]) -> None:
    for s in secrets:
        assert s not in text, "a secret leaked"


class Flaky(httpx.BaseTransport):
    """The real transport, except while ``down``: connection refused (or ``status``)."""

    def __init__(self) -> None:
        self.real = httpx.HTTPTransport()
        self.down = False
        self.status: int | None = None
        self.failed = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            self.failed += 1
            if self.status is not None:
                return httpx.Response(
                    self.status, json={"error": {"message": "down", "type": "X", "code": self.status}}
                )
            raise httpx.ConnectError("connection refused", request=request)
        return self.real.handle_request(request)


# -- unit: prefixes, margin --------------------------------------------------------------------------
def test_longest_prefix_on_path_boundaries() -> None:
    store = CredentialStore()
    cfg = {"s3.access-key-id": "AKIAEXAMPLE1", "s3.session-token-expires-at-ms": str(int((time.time() + 60) * 1000))}
    store.register(
        "shop.orders",
        [
            {"prefix": "s3://b/wh/shop/orders", "config": cfg},
            {"prefix": "s3://b/wh/shop/orders/data/hot/", "config": cfg},
        ],
    )
    store.register("shop.orders_archive", [{"prefix": "s3://b/wh/shop/orders_archive", "config": cfg}])
    store.register("wh", [("s3://b/wh", cfg)])

    def prefix(path: str, table: str | None = None) -> str | None:
        c = store.match(path, table=table)
        return c.prefix if c else None

    assert prefix("s3://b/wh/shop/orders/data/x.parquet") == "s3://b/wh/shop/orders"
    assert prefix("s3://b/wh/shop/orders") == "s3://b/wh/shop/orders"
    assert prefix("s3://b/wh/shop/orders/data/hot/x.parquet") == "s3://b/wh/shop/orders/data/hot"
    assert prefix("s3://b/wh/shop/orders/data/hotter/x.parquet") == "s3://b/wh/shop/orders"
    assert prefix("s3://b/wh/shop/orders_archive/data/x.parquet") == "s3://b/wh/shop/orders_archive"
    assert prefix("s3a://b/wh/shop/orders_archive/x") == "s3://b/wh/shop/orders_archive"
    assert prefix("s3://b/wh/shop/returns/x") == "s3://b/wh"
    assert prefix("s3://b/whx/y") is None and prefix("s3://other/wh/shop/orders/x") is None
    # restricted to one table, a sibling's prefix never matches
    assert prefix("s3://b/wh/shop/orders_archive/x", table="shop.orders") is None
    assert prefix("s3://b/wh/shop/orders_archivex", table="shop.orders_archive") is None
    assert covers("s3://b/wh/", "s3://b/wh/x") and not covers("s3://b/wh/orders", "s3://b/wh/orders_archive")
    assert refresh_margin(TTL) == 1.0 and refresh_margin(100) == 20.0 and refresh_margin(3600) == 300.0


# -- unit: the refresher on a fake clock ----------------------------------------------------------------
class FakeCatalog:
    """A MockTransport handler serving ``/credentials`` with scripted outcomes on a fake clock."""

    def __init__(self, clock: list[float], ttl: float = 100.0):
        self.clock, self.ttl = clock, ttl
        self.script: list[Any] = []  # per request: 200 (default), an int status, or "connect"
        self.requests = 0
        self.n = 0
        self.delay = 0.0
        self.auth: list[str] = []

    def creds(self) -> dict[str, Any]:
        self.n += 1
        return {
            "prefix": "s3://b/wh/t",
            "config": {
                "s3.access-key-id": f"ASIAFAKEKEY{self.n:04d}",
                "s3.secret-access-key": f"fake-secret-{self.n:04d}-zz",
                "s3.session-token": f"fake-session-token-{self.n:04d}",
                "s3.session-token-expires-at-ms": str(int((self.clock[0] + self.ttl) * 1000)),
            },
        }

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.auth.append(request.headers.get("authorization", ""))
        assert request.headers["x-iceberg-access-delegation"] == "vended-credentials"
        if self.delay:
            time.sleep(self.delay)
        outcome = self.script.pop(0) if self.script else 200
        if outcome == "connect":
            raise httpx.ConnectError("refused", request=request)
        if outcome != 200:
            return httpx.Response(
                outcome, json={"error": {"message": "nope fake-user-token-1", "type": "E", "code": outcome}}
            )
        return httpx.Response(200, json={"storage-credentials": [self.creds()]})


@pytest.fixture
def fake() -> Iterator[tuple[CredentialStore, FakeCatalog, list[float]]]:
    clock = [1_000_000.0]
    cat = FakeCatalog(clock)
    store = CredentialStore(transport=httpx.MockTransport(cat), clock=lambda: clock[0])
    store.refresher._sleep = lambda s: None
    store.register(
        "ns.t",
        [cat.creds()],
        location="s3://b/wh/t",
        refresh_url="http://catalog.test/v1/x/credentials",
        token=lambda: "fake-user-token-1",
        mode="read",
    )
    yield store, cat, clock
    store.close()


def test_refreshes_ahead_of_expiry_only_when_due(fake) -> None:  # type: ignore[no-untyped-def]
    store, cat, clock = fake
    seen: list[tuple[str, str]] = []
    store.subscribe(lambda t, old, new: seen.append((old, new)))
    first = store.credential_for("ns.t", "s3://b/wh/t/data/x.parquet")
    clock[0] += 79  # margin = 20 s of 100 s: not yet due
    assert store.credential_for("ns.t", "s3://b/wh/t/x") is first and cat.requests == 0
    clock[0] += 2
    fresh = store.credential_for("ns.t", "s3://b/wh/t/x")
    assert fresh is not first and fresh.generation > first.generation and cat.requests == 1
    assert cat.auth == ["Bearer fake-user-token-1"]
    assert seen == [(VALID, REFRESHING), (REFRESHING, VALID)]
    [row] = store.snapshot()
    assert row["state"] == VALID and row["refreshes"] == 1 and row["mode"] == "read" and row["seconds_left"] == 100.0
    with pytest.raises(Exception, match="covers"):
        store.credential_for("ns.t", "s3://b/wh/t_archive/x")


def test_single_flight_serves_current_credentials_meanwhile(fake) -> None:  # type: ignore[no-untyped-def]
    store, cat, clock = fake
    cat.delay = 0.3
    clock[0] += 90
    errors: list[BaseException] = []

    def use() -> None:
        try:
            store.credential_for("ns.t", "s3://b/wh/t/x")
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and cat.requests == 1 and store.entry("ns.t").refreshes == 1


def test_transient_failures_keep_serving_then_fail_after_expiry(fake) -> None:  # type: ignore[no-untyped-def]
    store, cat, clock = fake
    cat.script = [503, "connect"] + [503] * 10
    clock[0] += 90
    before = store.credential_for("ns.t", "s3://b/wh/t/x")  # 503: the current credential is still served
    e = store.entry("ns.t")
    assert cat.requests == 1 and e.state == VALID and "HTTP 503" in (e.last_error or "")
    store.credential_for("ns.t", "s3://b/wh/t/x")  # backing off: no new request at once
    assert cat.requests == 1
    clock[0] += 3
    assert store.credential_for("ns.t", "s3://b/wh/t/x") is before and cat.requests == 2  # connect error, retried
    assert "unreachable" in (e.last_error or "")
    clock[0] += 10  # past expiry, catalog still failing: a few tries in place, then failed
    with pytest.raises(CredentialsRefreshError, match="ns.t") as err:
        store.credential_for("ns.t", "s3://b/wh/t/x")
    assert cat.requests == 2 + store.refresher.max_attempts and store.state("ns.t") == FAILED
    assert "fake-user-token-1" not in str(err.value) and "fake-user-token-1" not in str(store.snapshot())
    clock[0] += 60  # the catalog is back: the next use recovers
    cat.script = []
    assert store.credential_for("ns.t", "s3://b/wh/t/x") is not before and store.state("ns.t") == VALID


def test_403_marks_revoked_and_every_use_raises(fake) -> None:  # type: ignore[no-untyped-def]
    store, cat, clock = fake
    cat.script = [403]
    clock[0] += 90
    with pytest.raises(CredentialsRevokedError, match=r"shop|ns\.t") as err:
        store.credential_for("ns.t", "s3://b/wh/t/x")
    assert err.value.table == "ns.t" and store.state("ns.t") == REVOKED
    assert store.match("s3://b/wh/t/x") is None  # a revoked table's credentials are never handed out
    with pytest.raises(CredentialsRevokedError):
        store.ensure("ns.t")
    assert cat.requests == 1
    assert "fake-user-token-1" not in str(err.value) + str(store.snapshot())  # echoed token scrubbed
    assert store.refresh("ns.t") == VALID  # an explicit refresh tries again (grant restored)


def test_refresh_all_and_nothing_secret_in_reprs(fake) -> None:  # type: ignore[no-untyped-def]
    store, cat, clock = fake
    store.register("ns.u", [cat.creds()], refresh_url="http://catalog.test/u", token=lambda: "fake-user-token-1")
    store.register("ns.static", [("s3://b/wh/static", {"s3.access-key-id": "AKIASTATIC0001"})])
    assert store.refresh_all() == {"ns.static": VALID, "ns.t": VALID, "ns.u": VALID} and cat.requests == 0
    clock[0] += 85
    assert store.refresh_all() == {"ns.static": VALID, "ns.t": VALID, "ns.u": VALID} and cat.requests == 2
    assert store.refresh_all(force=True) and cat.requests == 4
    secrets = [*secrets_of(store, "ns.t", "ns.u", "ns.static"), "fake-user-token-1"]
    assert len(secrets) == 8
    text = " ".join(
        [
            repr(store),
            str(store.snapshot()),
            repr(store.entry("ns.t")),
            repr(store.match("s3://b/wh/t/x")),
            repr(store.entry("ns.t").credentials),
        ]
    )
    assert_no_secret(text, secrets)
    assert set(store.snapshot()[0]) == {
        "table",
        "prefix",
        "mode",
        "state",
        "expires_at",
        "seconds_left",
        "last_refresh",
        "refreshes",
        "last_error",
    }


# -- live: pyiceberg on the emulator --------------------------------------------------------------------
@pytest.mark.slow  # several credential TTLs of real time (~13 s)
def test_read_loop_over_several_ttls_refreshes_once_per_ttl(lake: Lake) -> None:
    store = CredentialStore()
    seen: list[tuple[str, str, str]] = []
    store.subscribe(lambda t, old, new: seen.append((t, old, new)))
    t = lake.load("reader", "shop.orders", store, mode="read")
    stock = lake.catalogs["reader"].load_table("shop.orders")  # pyiceberg's own FileIO: never refreshes
    assert isinstance(t, SessionTable) and isinstance(t.io, VendedFileIO)
    sts_before = lake.handle.services.vendor.sts_calls
    keys, secrets = set(), []
    start_t = time.time()
    while time.time() - start_t < 3.25 * TTL:
        assert t.scan().to_arrow().num_rows >= 2
        cred = store.match(t.metadata.location)
        keys.add(cred.config["s3.access-key-id"])
        secrets += [cred.config[k] for k in SECRET_KEYS]
        time.sleep(0.25)
    entry = store.entry("shop.orders")
    # refresh 1 s before each 4 s expiry: about one refresh per TTL, each one STS call
    assert 3 <= entry.refreshes <= 5, entry.refreshes
    assert len(keys) == entry.refreshes + 1
    assert lake.handle.services.vendor.sts_calls - sts_before <= entry.refreshes + 1
    assert ("shop.orders", VALID, REFRESHING) in seen and ("shop.orders", REFRESHING, VALID) in seen
    assert all(new in (VALID, REFRESHING) for _, _, new in seen)
    with pytest.raises(OSError):  # the emulator really enforces expiry: stock pyiceberg fails now
        stock.scan().to_arrow()
    # nothing secret in what a notebook shows
    secrets += [lake.ids["reader"].token()]
    text = " ".join(
        [
            repr(store),
            str(store.snapshot()),
            repr(entry),
            repr(t.io),
            repr(t),
            str(t.config),
            str(t.io.properties),
            repr(store.match(t.metadata.location)),
            str(seen),
        ]
    )
    assert_no_secret(text, secrets)


@pytest.mark.slow  # waits out real credential lifetimes (~5 s): off the fast set (5-min budget)
def test_writes_and_table_refresh_keep_fresh_credentials(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("etl", "shop.returns", store, mode="write")
    n = t.scan().to_arrow().num_rows
    time.sleep(TTL + 0.5)  # the load's credentials have expired by now
    t.append(ROWS)
    assert t.scan().to_arrow().num_rows == n + 2 and store.entry("shop.returns").refreshes >= 1
    other = lake.load("etl", "shop.returns", CredentialStore())
    other.append(ROWS)
    assert t.refresh() is t and isinstance(t.io, VendedFileIO)
    assert t.scan().to_arrow().num_rows == n + 4
    assert store.snapshot()[0]["mode"] == "write"


@pytest.mark.slow  # waits out a real credential lifetime (~5 s): off the fast set (5-min budget)
def test_catalog_unreachable_serves_valid_credentials_until_expiry_then_failed(lake: Lake) -> None:
    flaky = Flaky()
    store = CredentialStore(transport=flaky)
    t = lake.load("reader", "shop.orders", store)
    expires = store.entry("shop.orders").expires_at
    assert expires is not None
    flaky.down = True
    while time.time() < expires - 0.6:  # refresh due after ~3 s: attempts fail, reads go on
        assert t.scan().to_arrow().num_rows >= 2
        time.sleep(0.2)
    entry = store.entry("shop.orders")
    assert flaky.failed >= 1 and entry.state == VALID and "unreachable" in (entry.last_error or "")
    time.sleep(max(0.0, expires - time.time()) + 0.2)
    with pytest.raises(CredentialsRefreshError, match="shop.orders"):
        t.scan().to_arrow()
    assert store.state("shop.orders") == FAILED
    flaky.down = False
    assert store.refresh("shop.orders") == VALID  # at once, without waiting for the backoff
    assert t.scan().to_arrow().num_rows >= 2 and store.state("shop.orders") == VALID


@pytest.mark.slow  # waits out one real TTL (~3 s): off the fast set (5-min budget)
def test_revoked_grant_is_noticed_within_one_ttl(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store)
    t.scan().to_arrow()
    lake.handle.admin.revoke("readers", "TABLE_READ_DATA", "table shop.orders")
    try:
        deadline = time.time() + TTL + 1
        with pytest.raises(CredentialsRevokedError, match="shop.orders") as err:
            while time.time() < deadline:
                t.scan().to_arrow()
                time.sleep(0.2)
        assert store.state("shop.orders") == REVOKED
        assert "403" in str(store.snapshot()[0]["last_error"])
        with pytest.raises(CredentialsRevokedError):  # and stays so
            t.scan().to_arrow()
        assert lake.ids["reader"].token() not in str(err.value)
    finally:
        lake.handle.admin.grant("readers", "TABLE_READ_DATA", "table shop.orders")


def test_remote_signing_reads_through_the_sign_endpoint(lake: Lake) -> None:
    import s3fs  # noqa: F401  (remote signing reads through pyiceberg's FsspecFileIO)
    from pyiceberg.exceptions import SignError

    calls = []
    reader = lake.ids["reader"]

    def token() -> str:
        calls.append(1)
        return reader.token()

    store = CredentialStore()
    t = load_table(lake.catalogs["reader"], "shop.orders", store, token, lake.handle.uri, access="remote-signing")
    assert isinstance(t.io, SigningFileIO) and len(store) == 0
    assert not any(k in t.io.properties for k in SECRET_KEYS) and not any(k in t.config for k in SECRET_KEYS)
    since = time.time()
    assert t.scan().to_arrow().num_rows >= 2
    assert len(calls) >= 2  # the signer asks for the current token on every request
    signed = lake.handle.admin.audit(principal="reader", action="sign_request", since=since)
    assert signed and all(r.decision == "allow" for r in signed)
    # outside the table (a sibling prefix) and writes without TABLE_WRITE_DATA: refused by the catalog
    outside = "s3://lake-bucket/wh/shop/orders_archive/metadata/x.json"
    with pytest.raises(SignError, match="403"):
        t.io.new_input(outside).open().read()
    with pytest.raises(SignError, match="403"):
        t.append(ROWS)
    denied = lake.handle.admin.audit(principal="reader", action="sign_request", since=since)
    assert any(r.decision == "deny" for r in denied)
    # with write privilege, writes go through the signer too
    w = load_table(
        lake.catalogs["etl"], "shop.returns", store, lake.ids["etl"].token, lake.handle.uri, access="remote-signing"
    )
    n = w.scan().to_arrow().num_rows
    w.append(ROWS)
    assert w.scan().to_arrow().num_rows == n + 2


def test_keys_without_a_stated_expiry_are_refreshed_by_reload_ahead_of_an_assumed_lifetime() -> None:
    """Nessie 0.99 vends STS keys in the table config with no expiry; with ``assumed_ttl`` the store reloads the
    table ahead of it (without, the keys count as never expiring and only a forced refresh replaces them)."""
    clock = [1_000_000.0]
    loads: list[str] = []

    def reload(request: httpx.Request) -> httpx.Response:
        loads.append(request.url.path)
        n = len(loads)
        keys = {
            "s3.access-key-id": f"ASIANESSIE{n:04d}",
            "s3.secret-access-key": f"s-{n:04d}-zz",
            "s3.session-token": "t",
        }
        return httpx.Response(200, json={"metadata": {"location": "s3://b/wh/t"}, "config": keys})

    def store_with(assumed: float | None) -> CredentialStore:
        store = CredentialStore(transport=httpx.MockTransport(reload), clock=lambda: clock[0], assumed_ttl=assumed)
        first = {"s3.access-key-id": "ASIANESSIE0000", "s3.secret-access-key": "s-0000-zz", "s3.session-token": "t"}
        store.register(
            "ns.t",
            (),
            first,
            location="s3://b/wh/t",
            refresh_url="http://nessie.test/v1/p/namespaces/ns/tables/t",
            token=lambda: "fake-user-token-1",
        )
        return store

    never = store_with(None)
    assert never.entry("ns.t").expires_at is None
    clock[0] += 10**6
    assert never.credential_for("ns.t", "s3://b/wh/t/x").config["s3.access-key-id"] == "ASIANESSIE0000" and not loads
    never.close()

    store = store_with(100.0)
    assert store.entry("ns.t").expires_at == clock[0] + 100
    clock[0] += 79  # the usual margin (20 % of 100 s): not yet due
    assert store.credential_for("ns.t", "s3://b/wh/t/x").config["s3.access-key-id"] == "ASIANESSIE0000" and not loads
    clock[0] += 2
    fresh = store.credential_for("ns.t", "s3://b/wh/t/x")
    assert fresh.config["s3.access-key-id"] == "ASIANESSIE0001" and loads == ["/v1/p/namespaces/ns/tables/t"]
    assert fresh.expires_at == clock[0] + 100  # assumed again from the reload
    store.close()
    with pytest.raises(ConfigError, match="positive"):
        CredentialStore(assumed_ttl=0)
