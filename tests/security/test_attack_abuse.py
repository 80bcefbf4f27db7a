"""Abuse resistance and hygiene of the reference catalog, attacked as an attacker would (real HTTP on loopback).

Each test performs the attack against a running server first and then asserts the denial:
device-authorization and token-endpoint floods (429 + Retry-After for the flooder only),
oversized and deeply nested bodies (413 / 400), an internal error that must close its
connection cleanly, private file modes, secret-free DEBUG logs during a vend, equal-cost
client authentication, and token exchange that records the actor and needs a grant.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import stat
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from joserfc import jwt
from joserfc.jwk import KeySet

from lakesession.reference import ReferenceCatalog, start
from lakesession.reference import bootstrap as bootstrap_mod
from lakesession.reference.settings import AbuseLimits
from tests.factories import make_catalog

P = "/v1/lakesession"
DEVICE = "urn:ietf:params:oauth:grant-type:device_code"
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS = "urn:ietf:params:oauth:token-type:access_token"

POLICY = """
principals:
  - {name: alice, type: user, client_id: alice, client_secret: alice-secret-abuse-1}
  - {name: bob, type: user, client_id: bob, client_secret: bob-secret-abuse-1}
  - {name: hub, type: service, client_id: hub, client_secret: hub-secret-abuse-1}
roles:
  - {name: readers, members: [alice, bob]}
  - {name: exchangers, members: [hub]}
grants:
  - {role: readers, privilege: NAMESPACE_LIST, on: catalog}
  - {role: exchangers, privilege: TOKEN_EXCHANGE, on: catalog}
"""
SECRETS = {"alice": "alice-secret-abuse-1", "bob": "bob-secret-abuse-1", "hub": "hub-secret-abuse-1"}
OTHER_ADDRESS = "127.0.0.2"  # all of 127/8 is loopback on Linux: a second client address without a network


def from_address(handle: ReferenceCatalog, address: str = "127.0.0.1") -> httpx.Client:
    return httpx.Client(base_url=handle.uri, timeout=30, transport=httpx.HTTPTransport(local_address=address))


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    """A catalog with low limits, so a flood of a few hundred calls is enough to trip them."""
    with make_catalog(
        POLICY,
        data_dir=tmp_path_factory.mktemp("limited"),
        abuse=AbuseLimits(
            device_rate_per_client_address="30/minute",
            device_rate_per_address="100/minute",
            device_pending_per_address=1000,
            token_failures_per_client_address="10/minute",
            token_failures_per_address="40/minute",
        ),
    ) as handle:
        yield handle


def device_authorization(c: httpx.Client, client_id: str, **headers: str) -> httpx.Response:
    return c.post("/oidc/device_authorization", data={"client_id": client_id, "scope": "catalog"}, headers=headers)


def assert_throttled(resp: httpx.Response) -> None:
    assert resp.status_code == 429, resp.text
    retry = int(resp.headers["Retry-After"])
    assert 1 <= retry <= 60
    assert resp.json()["error"] in ("slow_down", "temporarily_unavailable", "invalid_request", "too_many_requests")


# -- device authorization flood ---------------------------------------------------------
def test_device_authorization_flood_throttles_only_the_flooder(limited: ReferenceCatalog) -> None:
    with from_address(limited) as flooder:
        statuses = [device_authorization(flooder, "flooder").status_code for _ in range(200)]
        assert statuses.count(200) == 30 and statuses.count(429) == 170, sorted(set(statuses))
        assert_throttled(device_authorization(flooder, "flooder"))
        # another client id from the same address still starts device login
        assert device_authorization(flooder, "lakesession-cli").status_code == 200
        # rotating client ids (any public id is accepted) runs into the per-address limit
        rotated = [device_authorization(flooder, f"flood-{i}").status_code for i in range(150)]
        assert rotated.count(429) >= 80 and rotated[-1] == 429
        assert_throttled(device_authorization(flooder, "flood-x"))
    with from_address(limited, OTHER_ADDRESS) as other:
        # another address signs in end to end with the shared public client
        start_ = device_authorization(other, "lakesession-cli")
        assert start_.status_code == 200, start_.text
        limited.admin.approve_device(start_.json()["user_code"], "alice")
        tok = other.post(
            "/oidc/token",
            data={"grant_type": DEVICE, "device_code": start_.json()["device_code"], "client_id": "lakesession-cli"},
        )
        assert tok.status_code == 200, tok.text
        assert other.get(
            f"{P}/namespaces", headers={"Authorization": f"Bearer {tok.json()['access_token']}"}
        ).is_success


def test_pending_device_codes_are_bounded_per_address(tmp_path_factory: pytest.TempPathFactory) -> None:
    handle = start(
        data_dir=tmp_path_factory.mktemp("pending"),
        device_code_ttl=2,
        abuse=AbuseLimits(device_rate_per_client_address="1000/minute", device_pending_per_address=20),
    )
    try:
        with from_address(handle) as flooder:
            statuses = [device_authorization(flooder, f"c{i % 3}").status_code for i in range(25)]
            assert statuses.count(200) == 20 and statuses[-1] == 429
            assert_throttled(device_authorization(flooder, "c0"))
            with from_address(handle, OTHER_ADDRESS) as other:
                assert device_authorization(other, "c0").status_code == 200
            time.sleep(2.2)  # expired codes no longer count against the address
            assert device_authorization(flooder, "c0").status_code == 200
    finally:
        handle.stop()


# -- token endpoint brute force -----------------------------------------------------------------
def test_token_endpoint_brute_force_is_throttled(limited: ReferenceCatalog) -> None:
    def attempt(c: httpx.Client, who: str, secret: str, path: str = "/oidc/token") -> httpx.Response:
        return c.post(path, data={"grant_type": "client_credentials", "scope": "catalog"}, auth=(who, secret))

    with from_address(limited) as attacker:
        statuses = [attempt(attacker, "alice", f"guess-{i}").status_code for i in range(25)]
        assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}, statuses
        assert_throttled(attempt(attacker, "alice", "guess-x", "/v1/oauth/tokens"))  # the Iceberg alias too
        # even the right secret is refused from the throttled (client, address): guessing gains nothing
        assert attempt(attacker, "alice", SECRETS["alice"]).status_code == 429
        # other clients on the same address are unaffected
        assert attempt(attacker, "bob", SECRETS["bob"]).status_code == 200
    with from_address(limited, OTHER_ADDRESS) as victim:
        assert attempt(victim, "alice", SECRETS["alice"]).status_code == 200


# -- request limits ----------------------------------------------------------------------------
def error_of(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == resp.status_code, body
    return dict(body["error"])


def test_oversized_body_is_413(limited: ReferenceCatalog) -> None:
    h = {"Authorization": f"Bearer {limited.admin.token_for('alice')}", "Content-Type": "application/json"}
    big = b'{"namespace": ["x"], "properties": {"k": "' + b"a" * (11 * 1024 * 1024) + b'"}}'
    with from_address(limited) as c:
        resp = c.post(f"{P}/namespaces", content=big, headers=h)
        assert resp.status_code == 413 and error_of(resp)["type"] == "BadRequestException"

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
            for i in range(0, len(big), 1 << 20):
                yield big[i : i + (1 << 20)]

        streamed = c.post(f"{P}/namespaces", content=chunks(), headers=h)
        assert streamed.status_code == 413 and "Content-Length" not in streamed.request.headers
        assert error_of(streamed)["type"] == "BadRequestException"
        assert c.get(f"{P}/namespaces", headers=h).status_code == 200  # the server still serves


def test_deeply_nested_json_is_400(limited: ReferenceCatalog) -> None:
    h = {"Authorization": f"Bearer {limited.admin.token_for('alice')}", "Content-Type": "application/json"}
    deep = '{"namespace": ["x"], "properties": ' + '{"a": ' * 10_000 + "1" + "}" * 10_000 + "}"
    with from_address(limited) as c:
        for path in (f"{P}/namespaces", f"{P}/namespaces/x/tables", f"{P}/transactions/commit"):
            resp = c.post(path, content=deep, headers=h)
            assert resp.status_code == 400, (path, resp.status_code, resp.text[:200])
            assert "nest" in error_of(resp)["message"]
        # a string full of brackets is not nesting
        flat = json.dumps({"namespace": ["brackets"], "properties": {"k": "[" * 5000 + "{" * 5000}})
        assert c.post(f"{P}/namespaces", content=flat, headers=h).status_code in (200, 403)


# -- a 500 closes its connection properly -----------------------------------------------------
def test_internal_error_closes_the_connection_cleanly(limited: ReferenceCatalog) -> None:
    def boom() -> None:
        raise RuntimeError("a bug")

    limited.app.add_api_route("/test-only/boom", boom, methods=["GET"], include_in_schema=False)
    port = int(limited.uri.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /test-only/boom HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
        assert head.startswith(b"HTTP/1.1 500")
        assert headers[b"connection"].lower() == b"close"
        while len(body) < int(headers[b"content-length"]):
            body += sock.recv(65536)
        err = json.loads(body)["error"]
        assert err["type"] == "InternalServerError" and "a bug" not in err["message"]
        sock.settimeout(5)
        assert sock.recv(1) == b""  # then an orderly close (FIN), not a reset
    with from_address(limited) as c:  # a keep-alive client reconnects and carries on
        assert c.get("/test-only/boom").status_code == 500
        assert c.get("/healthz").status_code == 200
        assert c.get("/test-only/boom").status_code == 500
        assert c.get("/healthz").status_code == 200


# -- file modes ---------------------------------------------------------------------------------
def test_state_files_are_private(tmp_path: Path) -> None:
    data = tmp_path / "fresh"  # created by start() with the process umask
    old = os.umask(0o022)
    try:
        handle = start(data_dir=data)
    finally:
        os.umask(old)
    try:
        handle.admin.create_principal("modes", client_id="modes", client_secret="modes-secret-1")  # writes the DB
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        files = [data / "catalog.db", data / "issuer-key.json", data / "admin-credentials"]
        files += [p for p in data.iterdir() if p.name.startswith("catalog.db-")]  # WAL and shared memory
        for f in files:
            assert f.exists() and stat.S_IMODE(f.stat().st_mode) == 0o600, (f.name, oct(f.stat().st_mode))
    finally:
        handle.stop()


def test_existing_loose_files_are_tightened(tmp_path: Path) -> None:
    data = tmp_path / "loose"
    start(data_dir=data).stop()
    os.chmod(data, 0o755)
    for f in (data / "catalog.db", data / "issuer-key.json"):
        os.chmod(f, 0o644)
    handle = start(data_dir=data)
    try:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        for f in (data / "catalog.db", data / "issuer-key.json"):
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f.name
    finally:
        handle.stop()


# -- equal-cost client authentication ------------------------------------------------------------
def median_ratio(measure: dict[str, Any], tries: int = 30, rounds: int = 3) -> float:
    """Median time of ``measure["unknown"](i)`` over ``measure["wrong"](i)``, the two interleaved.

    Of up to ``rounds`` rounds, the one closest to 1 counts: a busy machine (other processes on its two
    cores) can skew one round of ~1 ms operations by 30 %, while a real timing leak (an unknown id
    skipping the PBKDF2 verification: a ratio near 0.01) skews every round the same way."""
    best = float("inf")
    for _ in range(rounds):
        times: dict[str, list[float]] = {"unknown": [], "wrong": []}
        for i in range(tries):
            for kind in ("unknown", "wrong"):
                t0 = time.perf_counter()
                measure[kind](i)
                times[kind].append(time.perf_counter() - t0)
        ratio = statistics.median(times["unknown"]) / statistics.median(times["wrong"])
        best = min(best, ratio, key=lambda r: abs(math.log(r)))
        if 0.8 <= best <= 1.25:
            break
    return best


def test_unknown_client_ids_cost_the_same_as_wrong_secrets(limited: ReferenceCatalog) -> None:
    directory = limited.services.directory
    ratio = median_ratio(
        {
            "unknown": lambda i: directory.authenticate_client(f"nobody-{i}", f"guess-{i}"),
            "wrong": lambda i: directory.authenticate_client("alice", f"guess-{i}"),
        }
    )
    assert 0.8 <= ratio <= 1.25, f"unknown/wrong median ratio {ratio:.2f}"


@pytest.mark.slow  # ~60 authentications over HTTP
def test_unknown_client_ids_cost_the_same_over_http(tmp_path_factory: pytest.TempPathFactory) -> None:
    handle = start(
        data_dir=tmp_path_factory.mktemp("timing"),
        bootstrap=bootstrap_mod.parse(POLICY),
        abuse=AbuseLimits(
            token_failures_per_client_address="1000/minute",
            token_failures_per_address="1000/minute",
        ),
    )

    def attempt(c: httpx.Client, client_id: str) -> None:
        resp = c.post("/oidc/token", data={"grant_type": "client_credentials"}, auth=(client_id, "not-the-secret"))
        assert resp.status_code == 401 and resp.json()["error"] == "invalid_client"

    try:
        with from_address(handle) as c:
            ratio = median_ratio(
                {"unknown": lambda i: attempt(c, f"nobody-{i}"), "wrong": lambda i: attempt(c, "alice")}
            )
        assert 0.8 <= ratio <= 1.25, f"HTTP: unknown/wrong median ratio {ratio:.2f}"
    finally:
        handle.stop()


# -- token exchange ------------------------------------------------------------------------------
def exchange(c: httpx.Client, who: str, subject_token: str) -> httpx.Response:
    return c.post(
        "/oidc/token",
        data={"grant_type": EXCHANGE, "subject_token": subject_token, "subject_token_type": ACCESS},
        auth=(who, SECRETS[who]),
    )


def claims_of(handle: ReferenceCatalog, token: str) -> dict[str, Any]:
    keys = KeySet.import_key_set(httpx.get(handle.issuer_uri + "/jwks").json())
    return dict(jwt.decode(token, keys).claims)


def test_token_exchange_needs_a_grant_and_records_the_actor(limited: ReferenceCatalog) -> None:
    alice = limited.admin.token_for("alice")
    with from_address(limited, OTHER_ADDRESS) as c:
        # bob holds alice's token (leaked, or handed to his service): exchanging it must not make him alice
        refused = exchange(c, "bob", alice)
        assert refused.status_code == 400 and refused.json()["error"] == "unauthorized_client", refused.text
        # his own token he may exchange (down-scoping); the actor is still recorded
        own = exchange(c, "bob", limited.admin.token_for("bob"))
        assert own.status_code == 200 and claims_of(limited, own.json()["access_token"])["act"] == {"sub": "bob"}
        # a service granted TOKEN_EXCHANGE acts for alice, and the catalog's audit names the actor
        granted = exchange(c, "hub", alice)
        assert granted.status_code == 200, granted.text
        token = granted.json()["access_token"]
        claims = claims_of(limited, token)
        assert claims["sub"] == "alice" and claims["act"] == {"sub": "hub"}
        assert c.get(f"{P}/namespaces", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    records = limited.admin.audit(principal="alice", action="list_namespaces")
    assert records and records[-1].detail and records[-1].detail.get("actor") == "hub"


# -- no secret in DEBUG logs during a vend ---------------------------------------------------------
class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(f"{record.name} {record.getMessage()} {record.exc_text or ''}")
        except Exception:  # a record that cannot format still must not hide a leak elsewhere
            self.lines.append(f"{record.name} {record.msg!r} {record.args!r}")


@pytest.fixture
def all_logging_at_debug() -> Iterator[Collect]:
    """Every logger (existing or new) at DEBUG, propagating to one collecting handler on the root."""
    handler = Collect()
    root = logging.getLogger()
    saved = [(root, root.level, root.propagate, root.disabled)]
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            saved.append((logger, logger.level, logger.propagate, logger.disabled))
            logger.setLevel(logging.NOTSET)
            logger.propagate, logger.disabled = True, False
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for logger, level, propagate, disabled in saved:
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled


@pytest.mark.slow  # the S3/STS emulator
def test_debug_logs_carry_no_secret_during_a_vend(
    tmp_path_factory: pytest.TempPathFactory, all_logging_at_debug: Collect
) -> None:
    """Token, vend (STS AssumeRole), /credentials, /sign and the S3 GET the vended keys enable, all logged at DEBUG."""
    handle = start(
        warehouse="s3://abuse-bucket/wh",
        s3_emulator=True,
        credential_ttl=900,
        data_dir=tmp_path_factory.mktemp("s3logs"),
        bootstrap=bootstrap_mod.parse(
            POLICY + "  - {role: exchangers, privilege: CATALOG_MANAGE_CONTENT, on: catalog}\n"
        ),
    )
    try:
        with httpx.Client(base_url=handle.uri, timeout=30) as c:
            tok = c.post("/oidc/token", data={"grant_type": "client_credentials"}, auth=("hub", SECRETS["hub"]))
            token = tok.json()["access_token"]
            h = {"Authorization": f"Bearer {token}"}
            assert c.post(f"{P}/namespaces", json={"namespace": ["shop"]}, headers=h).status_code == 200
            schema = {
                "type": "struct",
                "schema-id": 0,
                "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
            }
            created = c.post(f"{P}/namespaces/shop/tables", json={"name": "orders", "schema": schema}, headers=h)
            assert created.status_code == 200, created.text
            loaded = c.get(
                f"{P}/namespaces/shop/tables/orders", headers={**h, "X-Iceberg-Access-Delegation": "vended-credentials"}
            )
            assert loaded.status_code == 200
            creds = loaded.json()["storage-credentials"][0]["config"]
            fresh = c.get(f"{P}/namespaces/shop/tables/orders/credentials", headers=h)
            assert fresh.status_code == 200
            location = loaded.json()["metadata-location"]
            signed = c.post(
                f"{P}/namespaces/shop/tables/orders/sign",
                json={"region": creds["client.region"], "uri": location.replace("s3://", f"{creds['s3.endpoint']}/"),
                      "method": "GET", "headers": {}},
                headers=h,
            )  # fmt: skip
            assert signed.status_code == 200, signed.text
        # the engine's S3 call with the vended credentials (botocore logs its request headers at DEBUG)
        s3 = boto3.client(
            "s3",
            endpoint_url=creds["s3.endpoint"],
            region_name=creds["client.region"],
            aws_access_key_id=creds["s3.access-key-id"],
            aws_secret_access_key=creds["s3.secret-access-key"],
            aws_session_token=creds["s3.session-token"],
            config=Config(s3={"addressing_style": "path"}),
        )
        bucket, _, key = location.removeprefix("s3://").partition("/")
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        secrets = [
            SECRETS["hub"],
            token,
            token.split(".")[2],
            creds["s3.secret-access-key"],
            creds["s3.session-token"],
            handle.admin_credentials.client_secret,
            handle.settings.s3.secret_access_key,  # the catalog's own storage key
        ]
        secrets += [c["config"]["s3.secret-access-key"] for c in fresh.json()["storage-credentials"]]
        secrets += [c["config"]["s3.session-token"] for c in fresh.json()["storage-credentials"]]
        text = "\n".join(all_logging_at_debug.lines)
        assert "botocore" in text and "AssumeRole" in text  # the STS exchange itself was logged at DEBUG
        leaked = [s[:6] + "…" for s in secrets if s and s in text]
        assert not leaked, f"secrets found in DEBUG logs: {leaked}"
    finally:
        handle.stop()


# -- sign-in page brute force (authorization code flow) ---------------------------------
def test_sign_in_page_brute_force_is_throttled(limited: ReferenceCatalog) -> None:
    """The /authorize form checks passwords: guessing there runs into the same failure allowance."""
    from tests.catalog.test_authcode import form_fields, pkce

    redirect = "http://127.0.0.1:9/brute/callback"
    limited.admin.apply_bootstrap(
        bootstrap_mod.parse(
            f"principals:\n  - {{name: brute-hub, type: service, client_secret: brute-hub-secret-1, "
            f"redirect_uris: [{redirect}]}}\n"
        )
    )
    _, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": "brute-hub",
        "redirect_uri": redirect,
        "scope": "catalog",
        "state": "st-brute",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }

    def attempt(c: httpx.Client, password: str) -> httpx.Response:
        page = c.get("/oidc/authorize", params=query)
        assert page.status_code == 200, page.text
        fields = {**form_fields(page.text), "username": "alice", "password": password, "action": "login"}
        return c.post("/oidc/authorize", data=fields)

    with from_address(limited, "127.0.0.3") as guesser:
        statuses = [attempt(guesser, f"guess-{i}").status_code for i in range(14)]
        assert statuses[:10] == [401] * 10 and statuses[-1] == 429, statuses
        blocked = attempt(guesser, SECRETS["alice"])  # even the right password is refused while throttled
        assert blocked.status_code == 429 and 1 <= int(blocked.headers["Retry-After"]) <= 60
        assert "code=" not in blocked.headers.get("location", "")
    with from_address(limited, "127.0.0.4") as other:  # another address signs in
        ok = attempt(other, SECRETS["alice"])
        assert ok.status_code == 302 and "code=" in ok.headers["location"], ok.text[:300]
