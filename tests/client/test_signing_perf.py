"""Remote signing costs what the reads cost: no per-thread S3 clients, shared TLS and signer connections.

Real parts only: the reference catalog and its S3 emulator on loopback, real SigV4 by the catalog,
s3fs/aiobotocore on the client. Costs are asserted as counts (clients built, signatures asked per
S3 request), not timings, so the suite stays deterministic on a busy machine.
"""

from __future__ import annotations

import pickle
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import pyarrow as pa
import pytest
from pyiceberg.exceptions import SignError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lakesession.catalog._tables import create_table
from lakesession.credentials import CredentialStore, SigningFileIO, _signing
from tests._lake import Lake
from tests.factories import make_catalog, shop_policy

POLICY = shop_policy("perf", reads="table perf.wide")
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
FILES = 4  # one data file and one manifest per append: a scan reads them from several threads


def signed(lake: Lake, who: str, name: str) -> Any:
    """``name`` loaded by ``who`` with remote signing (a fresh credential store)."""
    return lake.load(who, name, CredentialStore(), access="remote-signing")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with make_catalog(
        POLICY, bucket="perf-bucket", credential_ttl=300, data_dir=tmp_path_factory.mktemp("signperf")
    ) as handle:
        lk = Lake(handle, POLICY.secrets("etl", "reader"), name="perf")
        etl = lk.catalogs["etl"]
        etl.create_namespace("perf")
        store = CredentialStore()
        for name in ("wide", "other"):
            t = create_table(etl, f"perf.{name}", SCHEMA, store, lk.ids["etl"].token, handle.uri, mode="write")
            for i in range(FILES):
                t.append(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}))
        store.close()
        yield lk


class ClientCount:
    """Counts S3 clients built on the process's shared aiobotocore session (botocore's own event)."""

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def __call__(self, **_: Any) -> None:
        with self._lock:
            self.n += 1

    def __enter__(self) -> Self:
        _signing._shared_session().register("creating-client-class.s3", self, unique_id=f"count-{id(self)}")
        return self

    def __exit__(self, *_: object) -> None:
        _signing._shared_session().unregister("creating-client-class.s3", unique_id=f"count-{id(self)}")


# -- one S3 client per table load, whatever the number of threads ----------------------------------------
def test_a_signed_scan_builds_one_s3_client_for_all_its_threads(lake: Lake) -> None:
    t = signed(lake, "reader", "perf.wide")
    with ClientCount() as built:
        assert t.scan().to_arrow().num_rows == FILES * 10  # plans and reads from pyiceberg's thread pool
        assert t.scan().to_arrow().num_rows == FILES * 10
    assert built.n == 1  # pyiceberg caches filesystems per thread: one client per thread, per scan, before
    with ThreadPoolExecutor(8) as pool:
        seen = set(pool.map(lambda _: id(t.io.get_fs("s3")), range(32)))
    assert seen == {id(t.io.get_fs("s3"))} and t.io.get_fs("s3a") is t.io.get_fs("s3")


def test_each_request_is_signed_once_and_audited(lake: Lake) -> None:
    t = signed(lake, "reader", "perf.wide")
    fs = t.io.get_fs("s3")
    sent: list[str] = []
    fs.s3.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.method))
    before = {r.id for r in lake.handle.admin.audit(principal="reader", action="sign_request", limit=10_000)}
    assert t.scan().to_arrow().num_rows == FILES * 10
    records = [
        r
        for r in lake.handle.admin.audit(principal="reader", action="sign_request", limit=10_000)
        if r.id not in before
    ]
    assert sent and set(sent) <= {"GET", "HEAD"}
    # one signing call per S3 request (no re-signing, no request left unsigned), each one authorized + audited
    assert len({r.request_id for r in records}) == len(sent)
    assert all(r.decision == "allow" and r.securable == "table perf.wide" for r in records)


# -- sharing never crosses tables or principals ------------------------------------------------------------
def test_tables_keep_their_own_signer_and_principal(lake: Lake) -> None:
    reader = signed(lake, "reader", "perf.wide")
    etl = signed(lake, "etl", "perf.other")
    assert reader.io.get_fs("s3") is not etl.io.get_fs("s3")
    # each client's signer hook lives on that client's own copy of the shared session's event emitter
    assert reader.io.get_fs("s3").s3.meta.events is not etl.io.get_fs("s3").s3.meta.events
    assert etl.scan().to_arrow().num_rows == FILES * 10
    # the reader's FileIO signs at perf.wide's endpoint with the reader's token: perf.other is refused
    other_file = next(iter(etl.scan().plan_files())).file.file_path
    with pytest.raises(SignError, match="403"):
        reader.io.new_input(other_file).open().read()
    denied = lake.handle.admin.audit(principal="reader", action="sign_request", limit=50)
    assert any(r.decision == "deny" and "perf/other" in str(r.detail) for r in denied)
    # one keep-alive signer client on s3fs's loop, shared by both tables (it holds no token)
    from fsspec.asyn import get_loop

    assert list(_signing._clients) == [get_loop()]
    assert "Authorization" not in _signing._clients[get_loop()].headers


def test_the_shared_session_never_supplies_credentials(lake: Lake) -> None:
    t = signed(lake, "reader", "perf.wide")
    client = t.io.get_fs("s3").s3
    assert client._request_signer._credentials is None  # UNSIGNED: the catalog's signature is the only one
    assert t.scan().to_arrow().num_rows == FILES * 10


# -- TLS: built once, never weakened ------------------------------------------------------------------------
def test_tls_context_is_shared_and_still_verifies() -> None:
    cls = _signing._http_session_cls()
    a, _ = cls(verify=True)._build_ssl_contexts(None)
    b, _ = cls(verify=True)._build_ssl_contexts(None)
    assert a is b
    assert a.verify_mode == ssl.CERT_REQUIRED and a.check_hostname
    assert a.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded
    off, _ = cls(verify=False)._build_ssl_contexts(None)
    assert off is not a and off.verify_mode == ssl.CERT_NONE  # an explicit verify=False stays its own


def test_client_certificates_and_proxies_keep_per_client_contexts(tmp_path: Any) -> None:
    cls = _signing._http_session_cls()
    shared, _ = cls(verify=True)._build_ssl_contexts(None)
    proxied, proxy_ctx = cls(verify=True)._build_ssl_contexts("http://proxy.invalid:3128")
    assert proxied is not shared and proxy_ctx is not None
    with pytest.raises((OSError, ssl.SSLError)):  # aiobotocore's own path: it tries to load the certificate
        cls(verify=True, client_cert=str(tmp_path / "missing.pem"))._build_ssl_contexts(None)


# -- pickling (pyiceberg ships FileIOs to worker processes) ----------------------------------------------------
def test_pickled_signing_fileio_rebuilds_its_filesystem() -> None:
    io = SigningFileIO({"uri": "http://127.0.0.1:9", "s3.endpoint": "http://127.0.0.1:9", "s3.region": "us-east-1"})
    fs = io.get_fs("s3")
    clone = pickle.loads(pickle.dumps(io))
    assert clone.properties == io.properties
    other = clone.get_fs("s3")
    assert other is not fs and clone.get_fs("s3") is other
