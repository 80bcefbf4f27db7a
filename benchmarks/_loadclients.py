"""The client side of ``load.py``: sessions in separate processes, each a thread with its own connection.

A module of its own so that spawned client processes import only this (never the server's code).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

NS = "load"
PREFIX = "lakesession"
OPS = ("loadTable", "credentials", "commit", "append")


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))] * 1000


@dataclass
class Tally:
    """What one client process saw: latencies (s) per operation, statuses, request ids, rows committed."""

    lat: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    statuses: dict[str, int] = field(default_factory=dict)  # "op status" -> count
    errors: list[str] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows committed (acknowledged)
    commits: dict[str, int] = field(default_factory=dict)  # table -> commits acknowledged
    retries: int = 0
    unfinished: int = 0
    # Server-Timing per operation (s): queued in the server, handled, and the client's latency minus the server's
    queue: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    app: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    outside: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    audit: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    gil_lag: list[float] = field(default_factory=list)  # a client thread's wake-up delay, sampled every ~5 ms

    def merge(self, other: dict[str, Any]) -> None:
        for op, xs in other["lat"].items():
            self.lat[op] += xs
        for k, v in other["statuses"].items():
            self.statuses[k] = self.statuses.get(k, 0) + v
        self.errors += other["errors"]
        self.request_ids += other["request_ids"]
        for k, v in other["rows"].items():
            self.rows[k] = self.rows.get(k, 0) + v
        for k, v in other["commits"].items():
            self.commits[k] = self.commits.get(k, 0) + v
        self.retries += other["retries"]
        self.unfinished += other["unfinished"]
        for name in ("queue", "app", "outside", "audit"):
            for op, xs in other.get(name, {}).items():
                getattr(self, name)[op] += xs
        self.gil_lag += other.get("gil_lag", [])


def server_timing(header: str) -> dict[str, float]:
    """``queue;dur=1.2, app;dur=3.4`` -> {"queue": 0.0012, "app": 0.0034} (seconds)."""
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        try:
            out[name] = float(dur) / 1000
        except ValueError:
            continue
    return out


def gil_probe(tally: Tally, lock: threading.Lock, stop: threading.Event, every: float = 0.005) -> None:
    """How late a sleeping thread of this client process wakes: the wait for the process's GIL (and a core)."""
    lags = []
    while not stop.is_set():
        t0 = time.perf_counter()
        time.sleep(every)
        lags.append(max(0.0, time.perf_counter() - t0 - every))
    with lock:
        tally.gil_lag += lags


class Session:
    """One client session: its own keep-alive connection; every request carries a fresh X-Request-Id."""

    def __init__(self, base: str, token: str, tally: Tally, lock: threading.Lock):
        self.http = httpx.Client(
            base_url=base,
            headers={"Authorization": f"Bearer {token}", "X-Iceberg-Access-Delegation": "vended-credentials"},
            timeout=120,
        )
        self.tally = tally
        self.lock = lock

    def call(self, op: str, method: str, path: str, body: Any = None) -> httpx.Response:
        rid = uuid.uuid4().hex
        t0 = time.perf_counter()
        try:
            r = self.http.request(method, path, json=body, headers={"X-Request-Id": rid})
            r.read()
        except httpx.HTTPError as e:
            with self.lock:
                self.tally.errors.append(f"{op}: {type(e).__name__}: {e}")
            raise
        took = time.perf_counter() - t0
        timing = server_timing(r.headers.get("server-timing", ""))
        with self.lock:
            self.tally.lat[op].append(took)
            if "total" in timing:
                self.tally.queue[op].append(timing.get("queue", 0.0))
                self.tally.app[op].append(timing.get("app", 0.0))
                self.tally.audit[op].append(timing.get("audit", 0.0))
                self.tally.outside[op].append(max(0.0, took - timing["total"]))
            key = f"{op} {r.status_code}"
            self.tally.statuses[key] = self.tally.statuses.get(key, 0) + 1
            self.tally.request_ids.append(rid)
            if r.status_code not in (200, 409):
                self.tally.errors.append(f"{op}: {r.status_code} {r.text[:300]}")
        return r

    def load(self, table: str) -> dict[str, Any]:
        r = self.call("loadTable", "GET", f"/v1/{PREFIX}/namespaces/{NS}/tables/{table}")
        if r.status_code != 200:
            raise RuntimeError(f"loadTable {r.status_code}")
        return r.json()["metadata"]  # type: ignore[no-any-return]

    def credentials(self, table: str) -> None:
        r = self.call("credentials", "GET", f"/v1/{PREFIX}/namespaces/{NS}/tables/{table}/credentials")
        if r.status_code != 200 or not r.json().get("storage-credentials"):
            raise RuntimeError(f"credentials {r.status_code}: {r.text[:200]}")

    def append(self, table: str, meta: dict[str, Any], rows: int, deadline: float) -> bool:
        """Commit ``rows`` rows, reloading and retrying on 409; False if the hard deadline passed first."""
        t0, attempt = time.perf_counter(), 0
        while True:
            r = self.call("commit", "POST", f"/v1/{PREFIX}/namespaces/{NS}/tables/{table}", append_body(meta, rows))
            if r.status_code == 200:
                with self.lock:
                    self.tally.lat["append"].append(time.perf_counter() - t0)
                    self.tally.rows[table] = self.tally.rows.get(table, 0) + rows
                    self.tally.commits[table] = self.tally.commits.get(table, 0) + 1
                return True
            if r.status_code != 409:
                raise RuntimeError(f"commit {r.status_code}")
            if time.monotonic() > deadline:
                with self.lock:
                    self.tally.unfinished += 1
                return False
            with self.lock:
                self.tally.retries += 1
            # Iceberg's own commit retry: exponential backoff from 100 ms (commit.retry.min-wait-ms), jittered
            time.sleep(min(2.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.0))
            attempt += 1
            meta = self.load(table)

    def close(self) -> None:
        self.http.close()


def append_body(meta: dict[str, Any], rows: int) -> dict[str, Any]:
    """What pyiceberg's fast append commits (one new snapshot on main), built from the loaded metadata."""
    parent = meta.get("current-snapshot-id")
    parent = None if parent in (None, -1) else parent
    total = 0
    if parent is not None:
        snap = next(s for s in meta["snapshots"] if s["snapshot-id"] == parent)
        total = int(snap["summary"].get("total-records", "0"))
    sid = random.getrandbits(62)
    seq = int(meta.get("last-sequence-number", 0)) + 1
    snapshot: dict[str, Any] = {
        "snapshot-id": sid,
        "sequence-number": seq,
        "timestamp-ms": max(int(time.time() * 1000), int(meta.get("last-updated-ms", 0)) + 1),
        "manifest-list": f"{meta['location']}/metadata/snap-{sid}-0-{uuid.uuid4()}.avro",
        "summary": {
            "operation": "append",
            "added-records": str(rows),
            "total-records": str(total + rows),
            "added-data-files": "1",
        },
        "schema-id": meta.get("current-schema-id", 0),
    }
    if parent is not None:
        snapshot["parent-snapshot-id"] = parent
    return {
        "requirements": [
            {"type": "assert-table-uuid", "uuid": meta["table-uuid"]},
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent},
        ],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": sid},
        ],
    }


def session_loop(
    s: Session, table: str, until: float, period: float, rows: int, iterations: int | None, hard_deadline: float
) -> None:
    n = 0
    time.sleep(random.uniform(0, period))  # spread the sessions' start over one period
    while time.monotonic() < until and (iterations is None or n < iterations):
        start = time.monotonic()
        meta = s.load(table)
        s.credentials(table)
        if not s.append(table, meta, rows, hard_deadline):
            return
        n += 1
        rest = period * random.uniform(0.8, 1.2) - (time.monotonic() - start)
        if rest > 0 and iterations is None:
            time.sleep(rest)


def client_process(args: dict[str, Any], out: Any) -> None:
    """One client process: ``threads`` sessions; the tally goes back through ``out`` (a pipe)."""
    tally, lock = Tally(), threading.Lock()
    sessions = [Session(args["base"], args["token"], tally, lock) for _ in range(args["threads"])]
    until = args["until"]
    hard = until + args["grace"]

    def run(i: int) -> None:
        table = args["tables"][(args["first"] + i) % len(args["tables"])]
        try:
            session_loop(sessions[i], table, until, args["period"], args["rows"], args.get("iterations"), hard)
        except Exception as e:
            with lock:
                tally.errors.append(f"session {args['first'] + i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sessions))]
    stop = threading.Event()
    probe = threading.Thread(target=gil_probe, args=(tally, lock, stop), daemon=True)
    probe.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    probe.join()
    for s in sessions:
        s.close()
    out.send(json.dumps(tally.__dict__))
    out.close()


def run_clients(
    base: str, token: str, tables: list[str], processes: int, threads: int, seconds: float, period: float, **kw: Any
) -> Tally:
    """``processes`` × ``threads`` sessions in separate processes (spawned: nothing of the server inherited)."""
    ctx = mp.get_context("spawn")
    until = time.monotonic() + seconds  # CLOCK_MONOTONIC is system-wide on Linux: children share it
    procs, pipes = [], []
    for p in range(processes):
        recv, send = ctx.Pipe(duplex=False)
        a = dict(base=base, token=token, tables=tables, threads=threads, first=p * threads, until=until)
        a.update(period=period, rows=kw.get("rows", 10), grace=kw.get("grace", 60), iterations=kw.get("iterations"))
        proc = ctx.Process(target=client_process, args=(a, send), daemon=True)
        proc.start()
        procs.append(proc)
        pipes.append(recv)
    total = Tally()
    for proc, recv in zip(procs, pipes, strict=True):
        total.merge(json.loads(recv.recv()))
        proc.join(30)
    return total
