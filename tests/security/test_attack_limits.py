"""Limits that can't be bypassed or turned against a user (issue 23, findings 1-3), attacked over real
HTTP from real loopback source addresses (127.0.0.2, 127.0.0.3, … are all bindable on Linux).

1. A local process sends ``X-Forwarded-For`` to escape every per-address limit: it must count as the
   address it really comes from (unless the operator named it a trusted proxy).
2. Wrong secrets for one client id from many addresses must not lock the id's owner out.
3. A device-authorization flood from many addresses must not lock out everyone using the shared
   public client ``lakesession-cli``; a full pending-code store evicts the flooders' codes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pytest

from lakesession.reference import ReferenceCatalog, start
from lakesession.reference.settings import AbuseLimits
from tests.factories import Policy

DEVICE = "urn:ietf:params:oauth:grant-type:device_code"
POLICY = (
    Policy()
    .service("broker", "broker-secret-limits-1")
    .user("alice", "alice-secret-limits-1")
    .member("readers", "alice", "broker")
    .grant("readers", "NAMESPACE_LIST", "catalog")
)
BROKER_SECRET = "broker-secret-limits-1"


def from_address(handle: ReferenceCatalog, address: str) -> httpx.Client:
    return httpx.Client(base_url=handle.uri, timeout=60, transport=httpx.HTTPTransport(local_address=address))


def login(c: httpx.Client, who: str, secret: str, **headers: str) -> httpx.Response:
    data = {"grant_type": "client_credentials", "scope": "catalog"}
    return c.post("/oidc/token", data=data, auth=(who, secret), headers=headers)


def device_authorization(c: httpx.Client, client_id: str = "lakesession-cli") -> httpx.Response:
    return c.post("/oidc/device_authorization", data={"client_id": client_id, "scope": "catalog"})


def addresses(first: int, n: int) -> list[str]:
    return [f"127.0.{(i >> 8) & 255}.{i & 255}" for i in range(first, first + n)]


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    """A catalog with the shipped limits (the findings were made against them)."""
    handle = start(data_dir=tmp_path_factory.mktemp("defaults"), bootstrap=POLICY.parse())
    yield handle
    handle.stop()


# -- 1. X-Forwarded-For from a local process ---------------------------------------------------
@pytest.mark.slow  # a few secret checks (hashing) on a busy machine: ~5 s
def test_forwarded_for_from_a_local_process_does_not_escape_the_address_limit(tmp_path_factory) -> None:
    handle = start(
        data_dir=tmp_path_factory.mktemp("xff"),
        bootstrap=POLICY.parse(),
        abuse=AbuseLimits(token_failures_per_client_address="5/minute", token_failures_per_address="10/minute"),
    )
    try:
        with from_address(handle, "127.0.0.1") as attacker:  # the address uvicorn trusted by default
            statuses = [
                login(attacker, "alice", f"guess-{i}", **{"X-Forwarded-For": f"203.0.113.{i}"}).status_code
                for i in range(12)
            ]
        assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}, statuses
        with from_address(handle, "127.0.0.2") as owner:  # the rotation gained nothing, and hurt no one else
            assert login(owner, "alice", "alice-secret-limits-1").status_code == 200
    finally:
        handle.stop()


def test_a_named_trusted_proxy_forwards_client_addresses(tmp_path_factory) -> None:
    handle = start(
        data_dir=tmp_path_factory.mktemp("proxy"),
        bootstrap=POLICY.parse(),
        abuse=AbuseLimits(token_failures_per_client_address="3/minute", token_failures_per_address="3/minute"),
        trusted_proxies=["127.0.0.5"],
    )
    try:
        with from_address(handle, "127.0.0.5") as proxy:
            hits = [login(proxy, "alice", "x", **{"X-Forwarded-For": "198.51.100.7"}).status_code for _ in range(4)]
            assert hits == [401, 401, 401, 429]  # the forwarded client is throttled ...
            other = login(proxy, "alice", "alice-secret-limits-1", **{"X-Forwarded-For": "198.51.100.8"})
            assert other.status_code == 200  # ... not the proxy's other clients
        with from_address(handle, "127.0.0.6") as not_a_proxy:  # only the named proxy is believed
            statuses = [
                login(not_a_proxy, "alice", "x", **{"X-Forwarded-For": f"10.9.9.{i}"}).status_code for i in range(5)
            ]
            assert statuses[-1] == 429, statuses
    finally:
        handle.stop()


def test_serve_flag_and_config_key_name_trusted_proxies() -> None:
    from lakesession.reference.servecmd import build_parser
    from lakesession.reference.serveconfig import resolve

    args = build_parser().parse_args(["--trusted-proxies", "10.0.0.1, 10.1.0.0/16"])
    assert args.trusted_proxies == "10.0.0.1, 10.1.0.0/16"
    resolved = resolve(None, flags={"trusted_proxies": ("--trusted-proxies", ["10.0.0.1", "10.1.0.0/16"])})
    assert resolved.start_kwargs["trusted_proxies"] == ["10.0.0.1", "10.1.0.0/16"]
    assert not resolve(None, flags={}).start_kwargs.get("trusted_proxies")  # none by default


# -- 2. a client id can't be locked out by others' failures ----------------------------------------
@pytest.mark.slow  # 315 secret checks over HTTP from 21 addresses (~10-30 s on a busy 2-core machine)
def test_failures_from_many_addresses_do_not_lock_the_owner_out(defaults: ReferenceCatalog) -> None:
    guesses = itertools.count()
    statuses: list[int] = []
    for address in addresses(2 * 256 + 10, 21):  # 127.0.2.10 … : 15 wrong secrets each, under each address's limit
        with from_address(defaults, address) as attacker:
            statuses += [login(attacker, "broker", f"guess-{next(guesses)}").status_code for _ in range(15)]
    with from_address(defaults, "127.0.3.1") as owner:  # a fresh address with the real secret
        resp = login(owner, "broker", BROKER_SECRET)
        assert resp.status_code == 200, resp.text  # fa6e17e: 429 "retry in 42 s" (rule fail-client)
        assert statuses == [401] * 315  # every guess was checked, and refused
        assert owner.get(
            "/v1/lakesession/namespaces", headers={"Authorization": f"Bearer {resp.json()['access_token']}"}
        ).is_success
    with from_address(defaults, "127.0.2.10") as attacker:  # each guessing address is still bounded on its own
        assert [login(attacker, "broker", f"more-{i}").status_code for i in range(6)][-1] == 429


# -- 3. device login for everyone on the shared public client ---------------------------------------
@pytest.mark.slow  # 640 device authorizations from 32 addresses
def test_device_flood_from_many_addresses_does_not_lock_out_the_public_client(defaults: ReferenceCatalog) -> None:
    statuses: list[int] = []
    for address in addresses(4 * 256 + 10, 32):  # 127.0.4.10 …: 20 each, the per-(client, address) allowance
        with from_address(defaults, address) as flooder:
            statuses += [device_authorization(flooder).status_code for _ in range(20)]
            statuses.append(-device_authorization(flooder).status_code)  # one over: the flooder is throttled
    with from_address(defaults, "127.0.5.1") as user:  # a fresh address signs in with lakesession-cli
        started = device_authorization(user)
        assert started.status_code == 200, started.text  # fa6e17e: 429 (rule device-client, 600/minute)
        assert statuses == ([200] * 20 + [-429]) * 32
        defaults.admin.approve_device(started.json()["user_code"], "alice")
        tok = user.post(
            "/oidc/token",
            data={"grant_type": DEVICE, "device_code": started.json()["device_code"], "client_id": "lakesession-cli"},
        )
        assert tok.status_code == 200, tok.text


def test_a_full_device_store_evicts_the_flooders_codes(tmp_path_factory) -> None:
    handle = start(
        data_dir=tmp_path_factory.mktemp("pending-total"),
        bootstrap=POLICY.parse(),
        abuse=AbuseLimits(device_pending_per_address=10, device_pending_total=30),
    )
    try:
        flood: list[str] = []
        for address in addresses(6 * 256 + 10, 5):  # 50 pending codes wanted, 30 fit
            with from_address(handle, address) as flooder:
                for _ in range(10):
                    resp = device_authorization(flooder)
                    assert resp.status_code == 200, resp.text
                    flood.append(resp.json()["device_code"])
        with from_address(handle, "127.0.7.1") as user:
            started = device_authorization(user)
            assert started.status_code == 200, started.text
            with from_address(handle, "127.0.6.10") as flooder:  # the flood goes on: evicts its own kind
                for _ in range(10):
                    device_authorization(flooder)
            handle.admin.approve_device(started.json()["user_code"], "alice")
            tok = user.post(
                "/oidc/token",
                data={
                    "grant_type": DEVICE,
                    "device_code": started.json()["device_code"],
                    "client_id": "lakesession-cli",
                },
            )
            assert tok.status_code == 200, tok.text
            evicted = user.post(
                "/oidc/token", data={"grant_type": DEVICE, "device_code": flood[0], "client_id": "lakesession-cli"}
            )
            assert evicted.status_code == 400, evicted.text  # the oldest code of a flooder was evicted
        devices = handle.app.state.issuer.devices
        assert devices.by_device_code(flood[0]) is None and len(devices._by_device) <= 30
    finally:
        handle.stop()
