"""A busy sign-in service is one line with the server's Retry-After, never "check the network" (issue 40).

Against the REAL embedded issuer of a reference catalog on loopback: its pending-code store made full
by one code from each of a few /24s (real sockets from 127.a.b.c source addresses, as in
``tests/security/test_attack_device_flood.py``), its per-address rate limits made small. The device
login then comes from another loopback address through the client's own ``http_options``.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from lakesession.identity import DeviceCode, DeviceFlowError, DevicePrompt, LakesessionError, SignInBusyError
from lakesession.reference import ReferenceCatalog, start
from lakesession.reference.settings import AbuseLimits
from tests.factories import Policy

CLI = "lakesession-cli"
POLICY = Policy().user("alice", "alice-secret-busy-1")
BUSY = re.compile(r"^The catalog's sign-in service is busy \(HTTP (429|503)\); try again in (\d+) s\b")


def client(cat: ReferenceCatalog, address: str, **kw: object) -> DeviceCode:
    """A device-flow source whose requests leave from ``address`` (as a user's on another network would)."""
    issuer = cat.app.state.issuer
    meta = issuer.metadata()
    return DeviceCode(
        meta["device_authorization_endpoint"],
        meta["token_endpoint"],
        CLI,
        scope="catalog",
        issuer=issuer.issuer_url,
        http_options={"transport": httpx.HTTPTransport(local_address=address)},
        **kw,  # type: ignore[arg-type]
    )


def authorize_from(cat: ReferenceCatalog, address: str) -> httpx.Response:
    with httpx.Client(base_url=cat.uri, transport=httpx.HTTPTransport(local_address=address)) as c:
        return c.post("/oidc/device_authorization", data={"client_id": CLI, "scope": "catalog"})


@pytest.fixture
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    """A catalog whose store (4 codes) is full of one-code networks: new authorizations get 503."""
    cat = start(
        data_dir=tmp_path_factory.mktemp("busy"), bootstrap=POLICY.parse(), abuse=AbuseLimits(device_pending_total=4)
    )
    assert [authorize_from(cat, f"127.40.{i}.1").status_code for i in range(4)] == [200] * 4
    yield cat
    cat.stop()


def test_a_full_store_says_busy_with_its_retry_after(full: ReferenceCatalog) -> None:
    raw = authorize_from(full, "127.41.0.1")
    assert raw.status_code == 503
    with pytest.raises(SignInBusyError) as caught:
        client(full, "127.41.0.2").login()  # before: "Cannot start the device login: … answered HTTP 503.
    err = caught.value  #   Check the issuer URL and the network, then call login() again." (no Retry-After)
    message = str(err)
    match = BUSY.match(message)
    assert match and match.group(1) == "503", message
    assert "network" not in message and "\n" not in message
    assert err.status == 503 and err.retry_after is not None
    assert abs(int(match.group(2)) - int(raw.headers["Retry-After"])) <= 1 <= int(match.group(2)) <= 120
    assert isinstance(err, DeviceFlowError) and isinstance(err, LakesessionError)
    assert err._render_traceback_() == [f"\x1b[31mlakesession: {message}\x1b[0m"]  # a notebook shows one line


def test_a_rate_limited_address_says_busy_with_its_retry_after(tmp_path_factory: pytest.TempPathFactory) -> None:
    cat = start(
        data_dir=tmp_path_factory.mktemp("busy429"),
        bootstrap=POLICY.parse(),
        abuse=AbuseLimits(device_rate_per_address="1/minute"),
    )
    try:
        assert authorize_from(cat, "127.42.0.1").status_code == 200
        with pytest.raises(SignInBusyError) as caught:
            client(cat, "127.42.0.1").login()
        match = BUSY.match(str(caught.value))
        assert match and match.group(1) == "429" and 50 <= int(match.group(2)) <= 60, str(caught.value)
    finally:
        cat.stop()


@pytest.mark.slow  # waits out a real ~7 s Retry-After
def test_polls_wait_the_servers_retry_after_then_sign_in(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The token endpoint allows 2 calls per 9 s from the address: the third poll gets 429 (``slow_down``) with
    Retry-After ~7 s, longer than the interval even after slow_down's +5 s; the client waits that long (before:
    interval + jitter, into the throttle again) and the login completes once approved."""
    cat = start(
        data_dir=tmp_path_factory.mktemp("busypoll"),
        bootstrap=POLICY.parse(),
        abuse=AbuseLimits(token_rate_per_address="2/9 seconds"),
        device_poll_interval=1,
    )
    try:
        issuer = cat.app.state.issuer
        prompts: list[DevicePrompt] = []

        def on_prompt(prompt: DevicePrompt) -> None:
            prompts.append(prompt)
            threading.Timer(3.5, lambda: issuer.approve_device(prompt.user_code, "alice")).start()

        seen: list[tuple[float, int, str | None]] = []  # (when, status, Retry-After) of each token call

        def record(response: httpx.Response) -> None:
            if response.request.url.path.endswith("/token"):
                seen.append((time.monotonic(), response.status_code, response.headers.get("retry-after")))

        src = client(cat, "127.43.0.1", on_prompt=on_prompt, timeout=30)
        src._client.event_hooks["response"].append(record)
        began = time.monotonic()
        src.login()
        assert src.logged_in and prompts and time.monotonic() - began < 15
        statuses = [status for _, status, _ in seen]
        assert 429 in statuses and statuses[-1] == 200, seen
        for (when, status, after), (later, _, _) in itertools.pairwise(seen):
            if status == 429:  # the next poll came no sooner than the server asked
                assert after is not None and later - when >= int(after) - 0.1, seen
    finally:
        cat.stop()


@pytest.mark.slow  # waits out a code's real life (~4 s): off the fast set (5-min budget)
def test_a_poll_told_to_wait_past_the_codes_life_says_busy(tmp_path_factory: pytest.TempPathFactory) -> None:
    cat = start(
        data_dir=tmp_path_factory.mktemp("busypoll2"),
        bootstrap=POLICY.parse(),
        abuse=AbuseLimits(token_rate_per_address="2/minute"),
        device_poll_interval=1,
    )
    try:
        src = client(cat, "127.44.0.1", on_prompt=lambda p: None, timeout=6)
        began = time.monotonic()
        with pytest.raises(SignInBusyError) as caught:
            src.login()
        match = BUSY.match(str(caught.value))
        assert match and match.group(1) == "429" and 50 <= int(match.group(2)) <= 60, str(caught.value)
        assert time.monotonic() - began < 6  # gave up at once instead of polling into the throttle
    finally:
        cat.stop()
