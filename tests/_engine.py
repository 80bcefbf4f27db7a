"""``lakesession engine`` as a process for the tests: the real CLI, a real JVM, a real gRPC front door.

``start_engine(handle, ...)`` runs ``python -m lakesession.engine._cli`` against a reference catalog
(``tests.factories.make_catalog``) and waits for its ``READY sc://…`` line; the engine's log (stderr)
goes to a file the tests scan for secrets. ``seed_policy()`` is the seed-003 team: etl owns
``sales.orders``, bob reads it and may create views in ``sales``, alice may read only ``sales.v_eu``,
carol nothing; ``engine`` is the trusted engine's service principal (TOKEN_EXCHANGE on the catalog).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakesession
from lakesession._spark.jars import detect_spark
from tests.factories import Policy, stop_process

ENGINE_SECRET = "engine-secret-0003"
SECRETS = {"etl": "etl-secret-0003", "bob": "bob-secret-0003", "alice": "alice-secret-0003", "carol": "carol-0003"}


#: etl's ``sales.orders``: EU, US and APAC rows
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
        "region": ["EU", "US", "EU", "APAC", "EU"],
        "amount": pa.array([10.0, 20.0, 30.0, 40.0, 50.0]),
    }
)
#: bob's DEFINER view ``sales.v_eu``, and what it shows: (id, amount) of the EU rows
VIEW_SQL = "SELECT id, amount FROM sales.orders WHERE region = 'EU'"
EU = [(1, 10.0), (3, 30.0), (5, 50.0)]
#: every engine test module's marks: the engine is a Spark Connect service (pyspark 4)
ENGINE_TESTS = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(int(detect_spark().version.split(".")[0]) < 4, reason="the engine is Spark Connect: pyspark 4"),
]


def create_definer_view(catalog: Any, engine: RunningEngine) -> str:
    """bob creates the DEFINER view ``sales.v_eu`` through the engine (trusted engines protect the owner property)."""
    bob = login(catalog, "bob", engine)
    try:
        bob.engine().sql(
            f"CREATE VIEW lake.sales.v_eu TBLPROPERTIES ('trino.run-as-owner' = 'bob') AS {VIEW_SQL}"
        ).collect()
    finally:
        bob.close()
    return "sales.v_eu"


def login(catalog: Any, who: str, engine: RunningEngine | None = None) -> lakesession.Session:
    """``who`` logged in at ``catalog``'s issuer with client credentials, with ``engine`` configured."""
    return lakesession.connect(
        uri=catalog.uri,
        warehouse="lakesession",
        credential=f"{who}:{SECRETS[who]}",
        token_url=f"{catalog.issuer_uri}/token",
        engine=engine.address if engine is not None else None,
    )


def seed_policy() -> Policy:
    """seed 003's team (see the module docstring)."""
    return (
        Policy()
        .service("etl", SECRETS["etl"], role="eng")
        .service("engine", ENGINE_SECRET, role="engines")
        .user("bob", SECRETS["bob"], role="analysts")
        .user("alice", SECRETS["alice"], role="eu-readers")
        .user("carol", SECRETS["carol"])
        .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
        .grant("engines", "TOKEN_EXCHANGE", "catalog")
        .grant_all("analysts", ["TABLE_READ_DATA", "TABLE_LIST", "VIEW_CREATE", "VIEW_LIST"], "namespace sales")
        .grant("eu-readers", "VIEW_READ", "view sales.v_eu")
    )


@dataclass
class RunningEngine:
    address: str
    process: subprocess.Popen[str]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextmanager
def start_engine(
    handle: Any,
    tmp: Path,
    *,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    master: str = "local[2]",
    timeout: float = 240.0,
) -> Iterator[RunningEngine]:
    """The engine for ``handle``'s catalog, on a free loopback port; stopped (SIGTERM) when the block ends."""
    log = tmp / f"engine-{time.time_ns()}.log"
    cmd = [
        sys.executable,
        "-m",
        "lakesession.engine._cli",
        "--catalog",
        handle.uri,
        "--warehouse",
        "lakesession",
        "--client-id",
        "engine",
        "--issuer",
        handle.issuer_uri,
        "--port",
        "0",
        "--master",
        master,
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--print-ready",
        *(extra_args or []),
    ]
    environ = {**os.environ, "LAKESESSION_ENGINE_CLIENT_SECRET": ENGINE_SECRET, **(env or {})}
    with log.open("w") as err:
        # its own working directory: the tests check that Spark leaves nothing there (no spark-warehouse/)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=environ, cwd=tmp)
    try:
        address = _await_ready(proc, log, timeout)
        yield RunningEngine(address, proc, log)
    finally:
        stop_process(proc, timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def _await_ready(proc: subprocess.Popen[str], log: Path, timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("READY "):
            return line.split(" ", 1)[1].strip()
        if not line and proc.poll() is not None:
            break
    stop_process(proc)
    raise AssertionError(f"the engine did not start (exit {proc.poll()}):\n{log.read_text()[-4000:]}")


class RawConnect:
    """Spark Connect's gRPC methods called by hand (``pyspark.sql.connect.proto`` messages), as an attacker who
    skips pyspark's client would: any session id, any ``user_context``, any token or none.

    ``call(request, token)`` sends ``request`` to the method its type names (``ConfigRequest`` -> ``Config``);
    streaming methods answer a list. gRPC errors propagate (``grpc.RpcError``: ``code()``, ``details()``).
    ``received`` holds every answer's bytes and every error's text and trailing metadata (what the secret
    scans read).
    """

    _STREAMING = frozenset({"ExecutePlan", "ReattachExecute"})

    def __init__(self, engine: RunningEngine) -> None:
        import grpc
        from pyspark.sql.connect.proto import base_pb2

        self.pb: Any = base_pb2
        self._grpc = grpc
        self._channel = grpc.insecure_channel(engine.address.removeprefix("sc://"))
        self.received: list[str] = []

    def call(self, request: Any, token: str | None, *, authorization: str | None = None) -> Any:
        method = request.DESCRIPTOR.name.removesuffix("Request")
        answer = "ExecutePlan" if method == "ReattachExecute" else method
        response = getattr(self.pb, f"{answer}Response")
        kind = "unary_stream" if method in self._STREAMING else "unary_unary"
        stub = getattr(self._channel, kind)(
            f"/spark.connect.SparkConnectService/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )
        header = authorization if authorization is not None else (f"Bearer {token}" if token is not None else None)
        metadata = [("authorization", header)] if header is not None else []
        try:
            result = stub(request, metadata=metadata)
            out = list(result) if kind == "unary_stream" else result
        except self._grpc.RpcError as exc:
            self.received.append(describe_rpc_error(exc))
            raise
        for message in out if isinstance(out, list) else [out]:
            self.received.append(message.SerializeToString().decode("latin-1"))
        return out

    def stream(self, request: Any, token: str) -> Any:
        """A streaming call (``ExecutePlan``/``ReattachExecute``) as it comes: iterate it, ``cancel()`` it."""
        stub = self._channel.unary_stream(
            f"/spark.connect.SparkConnectService/{request.DESCRIPTOR.name.removesuffix('Request')}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self.pb.ExecutePlanResponse.FromString,
        )
        return stub(request, metadata=[("authorization", f"Bearer {token}")])

    def sql(self, query: str, session_id: str, **fields: Any) -> Any:
        """An ``ExecutePlanRequest`` running ``query`` in ``session_id`` (``fields``: operation_id, user_context …)."""
        context = fields.pop("user_context", None)
        request = self.pb.ExecutePlanRequest(session_id=session_id, **fields)
        request.plan.root.sql.query = query
        if context is not None:
            request.user_context.CopyFrom(self.pb.UserContext(**context))
        return request

    def close(self) -> None:
        self._channel.close()


def describe_rpc_error(exc: Any) -> str:
    """A gRPC error as text: code, details and trailing metadata (binary values as latin-1)."""
    parts = [str(exc.code()), str(exc.details())]
    for key, value in exc.trailing_metadata() or ():
        parts.append(f"{key}={value.decode('latin-1') if isinstance(value, bytes) else value}")
    return "\n".join(parts)


def arrow_rows(responses: list[Any]) -> list[dict[str, Any]]:
    """The rows of an ``ExecutePlan`` answer's Arrow batches."""
    rows: list[dict[str, Any]] = []
    for response in responses:
        if response.HasField("arrow_batch"):
            rows.extend(pa.ipc.open_stream(response.arrow_batch.data).read_all().to_pylist())
    return rows


def signed_in_token(handle: Any, who: str) -> str:
    """An access token of ``who`` from a sign-in session (a refresh family, with a ``sid``) at ``handle``'s issuer,
    as a notebook's device login leaves it: what revoking the sign-in session takes back."""
    import httpx

    first = handle.admin._issuer.issue_token(who, with_refresh=True)
    answer = httpx.post(
        f"{handle.issuer_uri}/token",
        data={"grant_type": "refresh_token", "refresh_token": first["refresh_token"], "client_id": "lakesession-cli"},
    )
    return str(answer.raise_for_status().json()["access_token"])
