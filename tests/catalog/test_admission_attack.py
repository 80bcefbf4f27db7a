"""Attack: 16 authenticated principals flood cheap requests; a light victim's loadTable must not wait for them.

The real ``lakesession serve`` (this worktree's code, ``LAKESESSION_SERVER_TIMING=1``) on loopback, the
principals and tokens of ``benchmarks/load_under_attack.py``. Sixteen attacker threads (one valid token each)
send ``GET /v1/config``, ``GET …/namespaces`` and ``HEAD …/tables/t`` back to back; the victim loads its table
every 100 ms. Server-side times (``Server-Timing: total``, ASGI call to response start) are compared, so the
clients sharing the machine's cores do not decide the outcome: without a fair gate every request waits for
the ~16 in flight, the victim's as long as the attackers' (measured before the gate: victim p90 54.3 ms,
attackers' median 47.8 ms, ratio 1.14); with it the victim is admitted ahead of the attackers' queue.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests._serve import ROOT

pytestmark = pytest.mark.slow  # a real server and 16 flooding clients for a few seconds


def _benchmark() -> ModuleType:
    bench = str(ROOT / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return importlib.import_module("load_under_attack")


def _timing(r: httpx.Response) -> tuple[float, float]:
    """The server's own time for ``r`` (ms): from its ASGI call to the response's start, and of it the wait
    at the admission gate (0 where there is no gate)."""
    from _loadclients import server_timing

    split = server_timing(r.headers.get("server-timing", ""))
    return split.get("total", float("nan")) * 1000, split.get("gate", 0.0) * 1000


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def test_a_light_victim_is_admitted_ahead_of_sixteen_flooding_principals(tmp_path: Path) -> None:
    bench = _benchmark()
    stack = bench.Stack(tmp_path, bench.parser().parse_args(["--attackers", "16", "--grants", "20"]))
    uri, table = stack.served.uri, f"/v1/{bench.PREFIX}/namespaces/{bench.NS}/tables/{bench.TABLE}"
    cheap = [
        ("GET", "/v1/config?warehouse=lakesession", 200),
        ("GET", f"/v1/{bench.PREFIX}/namespaces", 200),
        ("HEAD", table, 204),
    ]
    stop = threading.Event()
    attacker_totals: list[float] = []
    attacker_service: list[float] = []
    bad: list[str] = []

    def attack(token: str) -> None:
        with httpx.Client(base_url=uri, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            n = 0
            while not stop.is_set():
                method, path, want = cheap[n % len(cheap)]
                r = c.request(method, path)
                n += 1
                if r.status_code != want:
                    bad.append(f"{method} {path}: {r.status_code} {r.text[:200]}")
                total, gate = _timing(r)
                attacker_totals.append(total)
                attacker_service.append(total - gate)

    victim: list[float] = []
    victim_gate: list[float] = []
    try:
        with httpx.Client(base_url=uri, headers={"Authorization": f"Bearer {stack.victim}"}, timeout=60) as v:
            for _ in range(10):  # the connection and the server's caches
                assert v.get(table).status_code == 200
            threads = [threading.Thread(target=attack, args=(t,), daemon=True) for t in stack.tokens]
            for t in threads:
                t.start()
            time.sleep(1.5)  # every attacker connected and flooding
            for _ in range(40):
                r = v.get(table)
                assert r.status_code == 200, r.text
                total, gate = _timing(r)
                victim.append(total)
                victim_gate.append(gate)
                time.sleep(0.1)
            stop.set()
            for t in threads:
                t.join(30)
    finally:
        stop.set()
        stack.close()
    assert not bad, bad[:5]  # every attacker request was served as intended (the gate refuses none of them)
    assert len(attacker_totals) > 500, len(attacker_totals)  # the flood ran
    victim_p90, attackers_p50, service = _pct(victim, 90), _pct(attacker_totals, 50), _pct(attacker_service, 50)
    print(
        f"victim total p50/p90 {_pct(victim, 50):.1f}/{victim_p90:.1f} ms (gate p90 {_pct(victim_gate, 90):.1f} ms); "
        f"attackers' total p50 {attackers_p50:.1f} ms, service p50 {service:.1f} ms"
    )
    # Without the gate the victim waits as long as everyone (longer: its loadTable is the dearer request).
    assert victim_p90 <= 0.6 * attackers_p50, (victim_p90, attackers_p50)
    # With it the victim waits for a slot (a couple of attackers' service times), not for the attackers' queue.
    assert _pct(victim_gate, 90) <= max(3 * service, 5.0), (_pct(victim_gate, 90), service)
    assert victim_p90 <= 30.0, victim_p90
