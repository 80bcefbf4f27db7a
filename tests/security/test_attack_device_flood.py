"""Device logins no one can block (issue 40, V15 and V16; RFC 8628 §5.2, §3.5).

V15: one account approved 120 of its own device codes from three /24s; an approved code was never
evicted and had no per-account bound, so the store stayed full and every new user got 503
(Retry-After 589) for ten minutes. V16: one device authorization from each of 10,000 /24s filled the
store with one-code networks (none may be evicted), and every new login got 503 for ~9 minutes per burst.

Attacked as they were found: real HTTP from real loopback source addresses (127.a.b.c are all bindable
on Linux; the server takes the address from the socket, as in production), at a small store where a
flood is a few dozen requests. The 10,000-network flood feeds the server's own pending-code store
directly (the HTTP path of each code is the one the small floods take), while the new user signs in
over HTTP. The guarantee under test (docs/security.md, "Device login"): after a flood of any shape,
a new device login succeeds within ``device_code_ttl_under_pressure`` seconds (120 by default).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import httpx
import pytest

from lakesession.reference import ReferenceCatalog, start
from lakesession.reference.idp._devices import DeviceCredential, DeviceStore, Settled
from lakesession.reference.settings import AbuseLimits
from tests.factories import Policy

DEVICE = "urn:ietf:params:oauth:grant-type:device_code"
ALICE_SECRET = "alice-secret-flood-1"
MALLORY_SECRET = "mallory-secret-flood-1"
POLICY = Policy().user("alice", ALICE_SECRET).user("mallory", MALLORY_SECRET)
GUARANTEE = 120  # device_code_ttl_under_pressure's default: the documented bound after a flood


def from_address(handle: ReferenceCatalog, address: str) -> httpx.Client:
    return httpx.Client(base_url=handle.uri, timeout=60, transport=httpx.HTTPTransport(local_address=address))


def authorize(c: httpx.Client) -> httpx.Response:
    return c.post("/oidc/device_authorization", data={"client_id": "lakesession-cli", "scope": "catalog"})


def approve(c: httpx.Client, user_code: str, username: str, password: str) -> httpx.Response:
    form = {"user_code": user_code, "username": username, "password": password, "action": "approve"}
    return c.post("/oidc/device", data=form)


def poll(c: httpx.Client, device_code: str) -> httpx.Response:
    return c.post(
        "/oidc/token", data={"grant_type": DEVICE, "device_code": device_code, "client_id": "lakesession-cli"}
    )


# -- V15: one account approving its own codes ---------------------------------------------------------------
@pytest.fixture
def store_of_120(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    handle = start(
        data_dir=tmp_path_factory.mktemp("v15"), bootstrap=POLICY.parse(), abuse=AbuseLimits(device_pending_total=120)
    )
    yield handle
    handle.stop()


@pytest.mark.slow  # approves 120 codes (~5 s): off the fast set (5-min budget)
def test_v15_one_account_approving_120_own_codes_cannot_block_new_logins(store_of_120: ReferenceCatalog) -> None:
    """mallory: 120 codes from three /24s (four addresses each, ten codes per address, under every rate
    limit), each approved on the verification page as herself. Before: the store (120) was full of
    codes that could never be evicted; alice from another network got 503, Retry-After ~590."""
    began = time.perf_counter()
    codes: list[tuple[str, dict]] = []
    for net in (1, 2, 3):
        for host in (1, 2, 3, 4):
            address = f"127.15.{net}.{host}"
            with from_address(store_of_120, address) as m:
                for _ in range(10):
                    r = authorize(m)
                    assert r.status_code == 200, r.text
                    codes.append((address, r.json()))
    clients = {address: from_address(store_of_120, address) for address, _ in codes}
    approved = 0
    for address, grant in codes:
        page = approve(clients[address], grant["user_code"], "mallory", MALLORY_SECRET)
        approved += page.status_code == 200 and "Approved" in page.text
    assert "withdrawn" in page.text  # the page says which older approval made room
    assert approved == 120  # every approval is accepted (past the cap, her oldest approval is dropped)
    with from_address(store_of_120, "127.16.0.1") as alice:
        r = authorize(alice)
        assert r.status_code == 200, (r.status_code, r.headers.get("Retry-After"), r.text)  # before: 503, 589 s
        started = r.json()
        page = approve(alice, started["user_code"], "alice", ALICE_SECRET)
        assert page.status_code == 200 and "Approved" in page.text, page.text
        assert poll(alice, started["device_code"]).status_code == 200
    cap = AbuseLimits().device_approved_per_principal
    answers = [poll(clients[address], grant["device_code"]) for address, grant in codes[-cap - 10 :]]
    for c in clients.values():
        c.close()
    assert [r.status_code for r in answers[-cap:]] == [200] * cap  # her last `cap` approvals still sign in
    errors = [r.json()["error"] for r in answers[:-cap]]  # the older ones were withdrawn: expired_token
    assert errors == ["expired_token"] * 10, errors
    assert time.perf_counter() - began < 30


# -- V16: a flood from 10,000 networks ----------------------------------------------------------------------
def credential(address: str, user_code: str, ttl: float = 600) -> DeviceCredential:
    return DeviceCredential(
        "lakesession-cli", "catalog", user_code, expires_at=time.time() + ttl, interval=5, address=address
    )


def ten_thousand_networks() -> list[str]:
    """One address in each of 10,000 /24s (and /64s): the flood no per-network rule can evict."""
    return [f"10.{i >> 8 & 255}.{i & 255}.7" if i % 2 else f"2001:db8:{i:x}::7" for i in range(10_000)]


def test_v16_a_flood_from_ten_thousand_networks_blocks_new_logins_for_at_most_the_guarantee(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Default settings (10,000 pending codes, 600 s codes). Before: the user's 503 said Retry-After ~600
    (a code of the flood expires only then). Now the codes issued under pressure live ``GUARANTEE`` s,
    so the store frees at least half its room within that."""
    handle = start(data_dir=tmp_path_factory.mktemp("v16"), bootstrap=POLICY.parse())
    try:
        devices = handle.app.state.issuer.devices
        for address in ten_thousand_networks():
            devices.add(secrets.token_urlsafe(32), credential(address, secrets.token_hex(8)))
        assert len(devices) == 10_000
        with from_address(handle, "127.17.0.1") as alice:
            r = authorize(alice)
            assert r.status_code == 503 and r.json()["error"] == "temporarily_unavailable", r.text
            assert 1 <= int(r.headers["Retry-After"]) <= GUARANTEE, r.headers["Retry-After"]  # before: 589..600
    finally:
        handle.stop()


def test_v16_after_a_flood_from_ten_thousand_networks_a_new_login_succeeds_within_the_bound(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The same flood, with the bound at 2 s so the test can wait it out: the user is told to retry within
    it, and then signs in. The flood's first half keeps its 600 s lives; the second half is gone."""
    bound = 2
    handle = start(
        data_dir=tmp_path_factory.mktemp("v16-wait"), bootstrap=POLICY.parse(), device_code_ttl_under_pressure=bound
    )
    try:
        devices = handle.app.state.issuer.devices
        for address in ten_thousand_networks():
            devices.add(secrets.token_urlsafe(32), credential(address, secrets.token_hex(8)))
        flood_ended = time.monotonic()
        with from_address(handle, "127.18.0.1") as alice:
            r = authorize(alice)
            assert r.status_code == 503 and 1 <= int(r.headers["Retry-After"]) <= bound, r.headers
            time.sleep(int(r.headers["Retry-After"]))
            r = authorize(alice)
            assert r.status_code == 200, r.text
            assert time.monotonic() - flood_ended <= bound + 1.5
            started = r.json()
            assert started["expires_in"] == bound  # half the store (600 s codes) is still taken: under pressure
            page = approve(alice, started["user_code"], "alice", ALICE_SECRET)
            assert page.status_code == 200 and "Approved" in page.text, page.text
            assert poll(alice, started["device_code"]).status_code == 200
        assert len(devices) <= 10_000 // 2 + 5_000  # the 5,000 short-lived codes linger, holding no room
    finally:
        handle.stop()


@pytest.fixture
def small_pressured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    handle = start(
        data_dir=tmp_path_factory.mktemp("v16-http"),
        bootstrap=POLICY.parse(),
        abuse=AbuseLimits(device_pending_total=20),
        device_code_ttl_under_pressure=4,
    )
    yield handle
    handle.stop()


@pytest.mark.slow  # floods over HTTP (~5 s): off the fast set (5-min budget)
def test_v16_over_http_a_flood_from_thirty_networks_tells_each_code_its_short_life(
    small_pressured: ReferenceCatalog,
) -> None:
    """Every request over real sockets, one /24 each, in a store of 20: the first 10 codes get the normal
    600 s, the next ones the pressure lifetime of 4 s (``expires_in`` says so), the rest wait at most that
    long (503, Retry-After <= 4); then a new user from yet another network signs in within the bound."""
    responses = []
    for i in range(30):
        with from_address(small_pressured, f"127.19.{i}.1") as flooder:
            responses.append(authorize(flooder))
    flood_ended = time.monotonic()
    ok = [r.json()["expires_in"] for r in responses if r.status_code == 200]
    assert ok[:10] == [600] * 10 and set(ok[10:]) == {4} and len(ok) >= 20, ok
    refused = [r for r in responses if r.status_code != 200]
    assert refused and {r.status_code for r in refused} == {503}  # before: Retry-After ~600
    assert all(1 <= int(r.headers["Retry-After"]) <= 4 for r in refused), [r.headers for r in refused]
    with from_address(small_pressured, "127.20.0.1") as alice:
        deadline = flood_ended + 4 + 1.5
        while (r := authorize(alice)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(int(r.headers["Retry-After"]))
        assert r.status_code == 200, r.text
        started = r.json()
        assert approve(alice, started["user_code"], "alice", ALICE_SECRET).status_code == 200
        assert poll(alice, started["device_code"]).status_code == 200


# -- the store's new rules, one by one ----------------------------------------------------------------------
def test_past_the_cap_a_principals_oldest_settled_code_is_withdrawn_and_no_one_elses() -> None:
    devices = DeviceStore(total=100, per_principal=3)
    bob = credential("10.0.0.9", "B0")
    mine = [credential(f"10.0.{i}.1", f"M{i}") for i in range(5)]
    for c in [bob, *mine]:
        assert devices.add(secrets.token_urlsafe(32), c) is None
    assert devices.settle(bob, "bob") == Settled()
    for c in mine[:3]:
        assert devices.settle(c, "mallory") == Settled()
    assert devices.settle(mine[3], "mallory") == Settled(("M0",))  # the oldest of hers, not bob's
    assert devices.settle(mine[4], "mallory") == Settled(("M1",))
    assert mine[0].is_expired() and mine[1].is_expired() and not mine[2].is_expired()  # told expired_token
    assert devices.by_user_code("M0") is mine[0]  # lingers to say so, holding no room
    assert not bob.is_expired() and devices.settle(credential("10.0.0.9", "B1"), "bob") is None  # never added


def test_at_most_half_the_store_ever_holds_long_lived_codes() -> None:
    """The invariant behind the guarantee, under adds, redemptions and settlements in any order."""
    devices = DeviceStore(total=50, pressure_ttl=30)
    codes: list[str] = []
    for i in range(400):
        code = secrets.token_urlsafe(16)
        cred = credential(f"10.{i % 7}.{i % 11}.{i % 5}", f"U{i:05d}", ttl=600)
        if devices.add(code, cred) is None:
            codes.append(code)
            if i % 3 == 0:
                devices.settle(cred, f"p{i % 13}")
        if i % 4 == 0 and codes:
            devices.pop(codes.pop(i % len(codes)))
        long_lived = sum(c.expires_at > time.time() + 60 for c in devices._by_device.values())
        assert long_lived <= devices.high_water == 25


def test_a_network_over_its_quota_is_told_when_its_first_code_frees_not_its_oldest() -> None:
    """Under pressure a network's newest code (120 s) expires before its oldest (600 s): the 429 says so."""
    devices = DeviceStore(per_network=2, total=2, pressure_ttl=120)
    assert fill_one(devices, "10.9.9.1", "A0") is None  # below half: 600 s
    assert fill_one(devices, "10.9.9.2", "A1") is None  # at half: 120 s
    refused = fill_one(devices, "10.9.9.3", "A2")
    assert refused is not None and refused[0] == 429 and 110 < refused[1] <= 120, refused


def fill_one(devices: DeviceStore, address: str, user_code: str) -> tuple[int, float] | None:
    return devices.add(secrets.token_urlsafe(32), credential(address, user_code))


def test_a_store_full_of_approved_codes_still_frees_within_the_bound() -> None:
    """Approvals of many accounts cannot stretch the wait: half of any full store was issued under pressure."""
    devices = DeviceStore(total=4, pressure_ttl=50)
    creds = [credential(f"10.{i}.0.1", f"S{i}") for i in range(4)]
    for i, c in enumerate(creds):
        assert devices.add(secrets.token_urlsafe(32), c) is None
        assert devices.settle(c, f"user{i}") is not None
    refused = fill_one(devices, "10.9.0.1", "S9")
    assert refused is not None and refused[0] == 503 and 0 < refused[1] <= 50, refused
