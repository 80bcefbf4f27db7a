"""Credential vending costs, each next to its baseline from the same run (S3 emulator, real SigV4).

1. loadTable with vending p50: cache hit vs miss (baseline: loadTable without vending).
2. GET /credentials ÷ loadTable on a table with 10,000 snapshots (target <= 1/20).
3. STS calls per 1,000 loads of one table by one principal (target <= 2).
4. Reading a ~200 MB table through vended credentials vs remote signing (target <= 1.5).

    python benchmarks/vending.py [--snapshots 10000] [--read-mb 200] [--read-rounds 5] [--skip-read | --only-read]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lakesession.reference import bootstrap, start

POLICY = """
principals:
  - {name: etl, type: service, client_id: etl, client_secret: bench-secret-1}
roles:
  - {name: eng, members: [etl]}
grants:
  - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""
P = "/v1/lakesession"


def timed(fn, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def rest_catalog(handle):  # type: ignore[no-untyped-def]
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog(
        "bench",
        uri=handle.uri,
        warehouse="lakesession",
        credential="etl:bench-secret-1",
        **{"oauth2-server-uri": f"{handle.issuer_uri}/token"},
    )


def synthetic_history(handle, snapshots: int) -> str:  # type: ignore[no-untyped-def]
    """Register a table whose metadata carries ``snapshots`` snapshots (written straight to storage).

    A table owns its storage prefix, so the metadata is written under a location of its own (beside the
    seed table's, whose metadata it starts from), never inside the seed's."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    cat = rest_catalog(handle)
    seed = cat.create_table(("bench", "seed"), Schema(NestedField(1, "x", LongType(), required=False)))
    meta = json.loads(seed.metadata.model_dump_json())
    own = f"{seed.location().rsplit('/', 1)[0]}/history-{uuid.uuid4().hex[:8]}"
    meta["location"] = own
    now = int(time.time() * 1000)
    snaps, log, parent = [], [], None
    for i in range(snapshots):
        sid = 10_000_000 + i
        snap = {
            "snapshot-id": sid,
            "sequence-number": i + 1,
            "timestamp-ms": now - (snapshots - i) * 1000,
            "manifest-list": f"{own}/metadata/snap-{sid}-1-{uuid.uuid4()}.avro",
            "summary": {"operation": "append", "added-records": "1"},
            "schema-id": 0,
        }
        if parent is not None:
            snap["parent-snapshot-id"] = parent
        snaps.append(snap)
        log.append({"snapshot-id": sid, "timestamp-ms": snap["timestamp-ms"]})
        parent = sid
    meta.update(
        {
            "snapshots": snaps,
            "snapshot-log": log,
            "current-snapshot-id": parent,
            "last-sequence-number": snapshots,
            "refs": {"main": {"snapshot-id": parent, "type": "branch"}},
        }
    )
    location = f"{own}/metadata/99999-{uuid.uuid4()}.metadata.json"
    from pyiceberg.io import load_file_io

    # the catalog's own keys (the emulator's admin): the seed table's vended ones cover only its prefix
    out = load_file_io(handle.settings.s3.catalog_file_io(), location).new_output(location)
    with out.create(overwrite=True) as f:
        f.write(json.dumps(meta).encode())
    cat.register_table(("bench", "history"), location)
    return location


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=300)
    parser.add_argument("--read-mb", type=int, default=200)
    parser.add_argument("--read-rounds", type=int, default=5, help="part 4: interleaved scans per reader (best kept)")
    reads = parser.add_mutually_exclusive_group()
    reads.add_argument("--skip-read", action="store_true")
    reads.add_argument("--only-read", action="store_true", help="run part 4 only")
    args = parser.parse_args()
    if args.only_read:
        compare_reads(None, None, args.read_mb, args.read_rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        handle = start(
            warehouse="s3://bench-bucket/wh",
            s3_emulator=True,
            credential_ttl=3600,
            data_dir=tmp,
            bootstrap=bootstrap.parse(POLICY),
        )
        try:
            run(handle, args)
        finally:
            handle.stop()


def run(handle, args) -> None:  # type: ignore[no-untyped-def]
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    cat = rest_catalog(handle)
    cat.create_namespace("bench")
    cat.create_table(("bench", "t"), Schema(NestedField(1, "x", LongType(), required=False)))
    vendor = handle.services.vendor
    token = handle.admin.token_for("etl")
    auth = {"Authorization": f"Bearer {token}"}
    vended = {**auth, "X-Iceberg-Access-Delegation": "vended-credentials"}
    with httpx.Client(base_url=handle.uri) as http:
        url = f"{P}/namespaces/bench/tables/t"
        for _ in range(20):
            http.get(url, headers=auth)
        plain = timed(lambda: http.get(url, headers=auth), args.loads)

        def miss() -> None:
            vendor.invalidate()
            http.get(url, headers=vended)

        misses = timed(miss, max(30, args.loads // 10))
        hits = timed(lambda: http.get(url, headers=vended), args.loads)
        print("1. loadTable p50 (ms)")
        print(
            f"   without vending {p50(plain):7.2f}   vending cache hit {p50(hits):7.2f}   vending cache miss (STS) {p50(misses):7.2f}"
        )
        print(f"   ratio hit/plain {p50(hits) / p50(plain):.2f}   miss/hit {p50(misses) / p50(hits):.2f}")

        synthetic_history(handle, args.snapshots)
        hist = f"{P}/namespaces/bench/tables/history"
        for _ in range(5):
            http.get(hist, headers=vended)
            http.get(f"{hist}/credentials", headers=vended)
        metadata_cache = handle.services.extras["tables"].cache

        def cold_load() -> None:
            metadata_cache.clear()  # as after every commit: a new metadata file nobody has read yet
            json.loads(http.get(hist, headers=vended).content)

        def warm_load() -> None:
            json.loads(http.get(hist, headers=vended).content)

        def refresh() -> None:
            json.loads(http.get(f"{hist}/credentials", headers=vended).content)

        cold = timed(cold_load, 20)
        warm = timed(warm_load, 30)
        creds = timed(refresh, 200)
        size = len(http.get(hist, headers=vended).content)
        print(
            f"2. table with {args.snapshots} snapshots (LoadTableResult {size / 1e6:.1f} MB); client parses each response"
        )
        print(
            f"   loadTable p50: first load after a commit {p50(cold):7.2f} ms, repeat load (server cache) {p50(warm):7.2f} ms"
        )
        print(f"   /credentials p50 {p50(creds):7.2f} ms")
        print(
            f"   ratio /credentials ÷ loadTable = 1/{p50(cold) / p50(creds):.0f} after a commit (target <= 1/20), "
            f"1/{p50(warm) / p50(creds):.0f} on a repeat load"
        )

        vendor.invalidate()
        before = vendor.sts_calls
        ttl = vendor.s3.credential_ttl
        remaining: list[float] = []  # seconds of lifetime left on each handed-out credential
        for _ in range(1000):
            body = http.get(url, headers=vended).json()
            expires_ms = int(body["storage-credentials"][0]["config"]["s3.session-token-expires-at-ms"])
            remaining.append(expires_ms / 1000 - time.time())
        print(
            f"3. STS calls per 1,000 loads of one table by one principal: {vendor.sts_calls - before} (target <= 2); "
            f"baseline without cache: 1,000"
        )
        print(
            f"   lifetime left on handed-out credentials: min {min(remaining) / ttl:.1%} of the {ttl} s TTL "
            f"(target >= 90 %; reused only while >= {vendor.s3.min_remaining:.0%} remains)"
        )
    if not args.skip_read:
        compare_reads(handle, cat, args.read_mb, args.read_rounds)


class ServedCatalog:
    """Three processes, as in a deployment: the S3 emulator, ``lakesession serve`` (vending from
    it through its STS), and this client — so signing never waits on the store's work."""

    def __init__(self, tmp: str):
        import os
        import subprocess

        self.store = subprocess.Popen(
            [sys.executable, "-m", "lakesession.reference.storage.emulator", "bench-read"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        s3 = json.loads(self.store.stdout.readline())  # type: ignore[union-attr]
        policy = Path(tmp) / "policy.yaml"
        policy.write_text(POLICY)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": s3["access_key_id"], "AWS_SECRET_ACCESS_KEY": s3["secret_access_key"]}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lakesession.cli",
                "serve",
                "--port",
                "0",
                "--data-dir",
                f"{tmp}/served",
                "--warehouse",
                "s3://bench-read/wh",
                "--s3-role-arn",
                s3["role_arn"],
                "--s3-endpoint",
                s3["endpoint"],
                "--s3-region",
                s3["region"],
                "--bootstrap",
                str(policy),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        lines: dict[str, str] = {}
        while not {"catalog", "issuer"} <= lines.keys():
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise SystemExit("lakesession serve did not start")
            key, _, value = line.strip().partition(": ")
            lines[key] = value
        self.uri, self.issuer_uri = lines["catalog"], lines["issuer"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.store.stdin.close()  # type: ignore[union-attr]
        self.store.wait(timeout=30)


def compare_reads(_handle, _cat, megabytes: int, rounds: int = 5) -> None:  # type: ignore[no-untyped-def]
    """Full scans of one table: vended credentials (engine talks to S3) vs remote signing (catalog signs).

    Each scan starts from a fresh ``loadTable`` (as a query does), so it includes building the table's
    FileIO; the readers take turns, ``rounds`` times, and each keeps its best scan."""
    with tempfile.TemporaryDirectory() as tmp:
        served = ServedCatalog(tmp)
        try:
            _compare_reads(served, rest_catalog(served), megabytes, max(1, rounds))
        finally:
            served.stop()


def _compare_reads(handle, cat, megabytes: int, rounds: int) -> None:  # type: ignore[no-untyped-def]
    import numpy as np
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from lakesession.catalog._tables import load_table
    from lakesession.credentials import CredentialStore

    if ("bench",) not in cat.list_namespaces():
        cat.create_namespace("bench")
    table = cat.create_table(
        ("bench", "big"),
        Schema(NestedField(1, "a", LongType(), required=False), NestedField(2, "b", LongType(), required=False)),
    )
    rng = np.random.default_rng(7)
    chunk_mb = max(1, min(50, megabytes))  # up to 50 MB of random (incompressible) longs per append
    rows_per_chunk = chunk_mb * 1024 * 1024 // 16
    chunks = max(1, megabytes // chunk_mb)
    for _ in range(chunks):
        table.append(
            pa.table({"a": rng.integers(0, 2**62, rows_per_chunk), "b": rng.integers(0, 2**62, rows_per_chunk)})
        )
    data_bytes = sum(t.file.file_size_in_bytes for t in table.scan().plan_files())
    from lakesession.identity import ClientCredentials

    token = ClientCredentials(f"{handle.issuer_uri}/token", "etl", "bench-secret-1", scope="catalog").token
    store = CredentialStore()
    fsspec_cat = RestCatalogFsspec(handle)
    expected = rows_per_chunk * chunks
    loaders = {
        "vended, pyarrow S3": lambda: load_table(cat, ("bench", "big"), store, token, handle.uri),
        "vended, fsspec S3": lambda: fsspec_cat.load_table(("bench", "big")),
        "remote signing, fsspec S3": lambda: load_table(
            cat, ("bench", "big"), store, token, handle.uri, access="remote-signing"
        ),
    }
    results: dict[str, list[float]] = {k: [] for k in loaders}
    for _ in range(rounds):
        for name, loader in loaders.items():
            t = loader()
            t0 = time.perf_counter()
            assert t.scan().to_arrow().num_rows == expected
            results[name].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in results.items()}
    print(
        f"4. full scan of {data_bytes / 1e6:.0f} MB (best of {rounds}); S3 emulator, catalog and client in three processes"
    )
    for name, secs in best.items():
        print(f"   {name:27s} {secs:6.2f} s  ({data_bytes / 1e6 / secs:5.0f} MB/s)")
    print(
        f"   ratio remote signing / vended, same IO stack (fsspec) = "
        f"{best['remote signing, fsspec S3'] / best['vended, fsspec S3']:.2f} (target <= 1.5)"
    )
    print(
        f"   ratio remote signing (fsspec) / vended (pyarrow, the default) = "
        f"{best['remote signing, fsspec S3'] / best['vended, pyarrow S3']:.2f}"
    )
    store.close()


def RestCatalogFsspec(handle):  # type: ignore[no-untyped-def]
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog(
        "bench-fsspec",
        uri=handle.uri,
        warehouse="lakesession",
        credential="etl:bench-secret-1",
        **{"oauth2-server-uri": f"{handle.issuer_uri}/token", "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"},
    )


if __name__ == "__main__":
    main()
