"""The engine's front door: a gRPC server speaking Spark Connect, in front of the real one.

For every call it authenticates the caller's token (``_auth``), binds the Connect session id to
that principal (a session belongs to the user who opened it: another user's id is refused),
**replaces the client-supplied ``user_id`` with the principal**, refuses what the sandbox refuses
(``_sandbox``), configures a new session's catalog to the user's own gateway, expands views
(``_rewrite``), and forwards the call to the Spark Connect server on loopback, which accepts only
the front door (Spark's pre-shared token). Responses stream back as they are (bytes, not parsed),
except a SQL command's, whose echoed relation gets the user's own text back.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import grpc

from .._wire.enginerules import ERROR_CLASS, REFUSED_CLASS, SQL_STATE, chain_prefix
from ._auth import Authenticator, Unauthenticated
from ._rewrite import CatalogRefusal, ExpansionCache, Rewriter
from ._sandbox import ConfPolicy, Refused, check_plan, walk
from ._users import CatalogUnavailable, EngineUser, ExchangeRefused, Exhausted, SessionEnded, Users
from ._where import EMPTY_TABLE_LIST, QUESTION, Whereabouts, changes_where, list_tables_here

__all__ = ["FrontDoor", "SessionTable"]

logger = logging.getLogger("lakesession.engine")

SERVICE = "spark.connect.SparkConnectService"
_MAX_MESSAGE = 128 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
]

#: notebooks ping every 5 s while a call runs (``_engineclient``): gRPC's default (one per 5 min) would end them
_SERVER_OPTIONS = [
    *_CHANNEL_OPTIONS,
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 4_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.keepalive_permit_without_calls", 1),
]


def _identity(b: bytes) -> bytes:
    return b


REFUSED_REASON = "ENGINE_REFUSED"


def _error_metadata(rule: str, error_class: str | None, cls: str) -> dict[str, str]:
    """The ``ErrorInfo`` metadata: a refusal carries the rulebook's class, error class and SQLSTATE (as the JVM's
    do); another class (the catalog's 403) only itself and the rule."""
    import json

    metadata = {"classes": json.dumps([cls]), "rule": rule}
    if cls == REFUSED_CLASS:
        metadata |= {"errorClass": ERROR_CLASS, "sqlState": SQL_STATE}
    if error_class:  # INVALID_HANDLE.SESSION_CHANGED: pyspark's client then knows its session is gone
        metadata["errorClass"] = error_class
    return metadata


def _status(
    code: grpc.StatusCode, message: str, rule: str, error_class: str | None = None, cls: str = REFUSED_CLASS
) -> Any:
    """A gRPC status carrying an ``ErrorInfo`` (what Spark Connect clients turn into an exception)."""
    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2
    from grpc_status import rpc_status

    info = error_details_pb2.ErrorInfo(
        reason=REFUSED_REASON,
        domain="lakesession",
        metadata=_error_metadata(rule, error_class, cls),
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    return rpc_status.to_status(status_pb2.Status(code=code.value[0], message=message, details=[detail]))


_HANDLED = (Unauthenticated, Refused, Exhausted, ExchangeRefused, CatalogUnavailable, SessionEnded)


@dataclass
class SessionTable:
    """Connect session id -> the principal that opened it (ids are the client's UUIDs)."""

    _owners: dict[str, str] = field(default_factory=dict)
    _configured: dict[str, set[str]] = field(default_factory=dict)  # session -> catalogs configured in it
    _ended: OrderedDict[str, str] = field(default_factory=OrderedDict)  # sessions of evicted users (bounded)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def bind(self, session_id: str, principal: str) -> bool:
        """Claim ``session_id`` for ``principal``; True the first time. Another owner: ``Refused``."""
        if not session_id:
            raise Refused("session", "a request without a session id")
        with self._lock:
            owner = self._owners.get(session_id)
            if owner is None and session_id in self._ended:
                raise SessionEnded(self._ended[session_id])
            if owner is None:
                self._owners[session_id] = principal
                self._configured[session_id] = set()
                return True
        if owner != principal:
            logger.warning("refused %r using a session opened by another user", principal)
            raise Refused("session", "a session opened by another user", "open your own session")
        return False

    def needs(self, session_id: str, catalog: str) -> bool:
        """Whether ``catalog`` still has to be configured in ``session_id`` (marks it as configured)."""
        with self._lock:
            done = self._configured.setdefault(session_id, set())
            if catalog in done:
                return False
            done.add(catalog)
            return True

    def release(self, session_id: str, principal: str) -> None:
        with self._lock:
            if self._owners.get(session_id) == principal:
                del self._owners[session_id]
                self._configured.pop(session_id, None)

    def drop(self, principal: str, why: str) -> list[str]:
        """Forget every session of ``principal`` (evicted: ``why``); their ids (their next call: ``SessionEnded``)."""
        with self._lock:
            ids = [s for s, owner in self._owners.items() if owner == principal]
            for sid in ids:
                del self._owners[sid]
                self._configured.pop(sid, None)
                self._ended[sid] = why
            while len(self._ended) > 10_000:
                self._ended.popitem(last=False)
        return ids

    def count(self) -> int:
        with self._lock:
            return len(self._owners)


class FrontDoor:
    """The gRPC service: handlers for each Spark Connect method (``server()`` serves them)."""

    def __init__(
        self,
        backend: str,
        backend_token: str,
        authenticator: Authenticator,
        users: Users,
        conf_policy: ConfPolicy,
        sql_key: bytes,
        session_conf: Callable[[EngineUser], dict[str, str]],
        chain_conf: Callable[[EngineUser, str, str], dict[str, str]],
    ) -> None:
        from pyspark.sql.connect.proto import base_pb2

        self.pb = base_pb2
        self._channel = grpc.insecure_channel(backend, options=_CHANNEL_OPTIONS)
        self._metadata = (("authorization", f"Bearer {backend_token}"),)
        self.auth = authenticator
        self.users = users
        self.policy = conf_policy
        self.sessions = SessionTable()
        self._key = sql_key
        self._session_conf = session_conf
        self._chain_conf = chain_conf
        self.refusals = 0
        self.queries = 0

    # -- plumbing --------------------------------------------------------------------------
    def _call(self, kind: str, method: str) -> Any:
        path = f"/{SERVICE}/{method}"
        factory = getattr(self._channel, kind)
        return factory(path, request_serializer=_identity, response_deserializer=_identity)

    def _admit(self, request: Any, context: grpc.ServicerContext) -> EngineUser:
        """Authenticate, bind the session, overwrite ``user_context``; configure a new session."""
        caller = self.auth.authenticate(context.invocation_metadata())
        user = self.users.get(caller.principal, caller.token)
        new = self.sessions.bind(request.session_id, caller.principal)
        if new:
            try:
                self.users.open_session(user, request.session_id)
            except Exhausted:
                self.sessions.release(request.session_id, caller.principal)
                raise
        self.users.check(user, force=new)  # a revoked principal is refused (and evicted) here
        self.users.hold(user)  # until the call ends (``Users.tracked``): a running query is never idle
        request.user_context.Clear()
        request.user_context.user_id = caller.principal
        request.user_context.user_name = caller.principal
        if new:
            self._configure(user, request.session_id, self._session_conf(user))
        return user

    def _configure(self, user: EngineUser, session_id: str, pairs: dict[str, str]) -> None:
        """Set ``pairs`` in the Connect session (the front door's own call: the user never sees them)."""
        pb = self.pb
        req = pb.ConfigRequest(session_id=session_id, client_type="lakesession-engine")
        req.user_context.user_id = user.principal
        req.user_context.user_name = user.principal
        for k, v in pairs.items():
            req.operation.set.pairs.add(key=k, value=v)
        self._call("unary_unary", "Config")(req.SerializeToString(), metadata=self._metadata)

    @cached_property
    def expansions(self) -> ExpansionCache:
        """One expansion per statement: ``sql()``, ``collect()`` and analyses send the same text."""
        return ExpansionCache()

    @cached_property
    def whereabouts(self) -> Whereabouts:
        """Each session's current catalog and namespace, as its Spark resolves names."""
        return Whereabouts(self._ask_where)

    def _ask_where(self, session_id: str, user: EngineUser) -> list[tuple[Any, ...]]:
        """The rows of ``QUESTION`` run in ``session_id`` (the front door's own call, no user text)."""
        import pyarrow as pa

        pb = self.pb
        req = pb.ExecutePlanRequest(session_id=session_id, client_type="lakesession-engine")
        req.user_context.user_id = user.principal
        req.user_context.user_name = user.principal
        req.plan.root.sql.query = QUESTION
        rows: list[tuple[Any, ...]] = []
        for chunk in self._call("unary_stream", "ExecutePlan")(req.SerializeToString(), metadata=self._metadata):
            resp = pb.ExecutePlanResponse.FromString(chunk)
            if resp.HasField("arrow_batch"):
                table = pa.ipc.open_stream(resp.arrow_batch.data).read_all()
                rows.extend(tuple(row.values()) for row in table.to_pylist())
        return rows

    def _rewriter(self, user: EngineUser, session_id: str) -> Rewriter:
        def chain_conf(name: str, uri: str) -> None:
            if self.sessions.needs(session_id, name):
                self._configure(user, session_id, self._chain_conf(user, name, uri))

        def where() -> tuple[str, tuple[str, ...]]:
            return self.whereabouts.get(session_id, user)

        return Rewriter(user, self._key, chain_conf, where=where, cache=self.expansions, session_id=session_id)

    def _prefix(self, user: EngineUser | None = None) -> str:
        return chain_prefix(self.users.catalog_name)

    def _rewrite(self, plan: Any, user: EngineUser, session_id: str) -> dict[str, str]:
        """Expand views in every SQL text and named table of ``plan``; returns signed text -> original."""
        try:
            return self._expand(plan, user, session_id)
        except Exception as exc:  # the catalog down: one line (UNAVAILABLE), not requests' exception text
            down = CatalogUnavailable.of(exc, user.catalog_uri)
            if down is None:
                raise
            raise down from None

    def _expand(self, plan: Any, user: EngineUser, session_id: str) -> dict[str, str]:
        rewriter = self._rewriter(user, session_id)
        if changes_where(plan):  # USE, SET CATALOG, setCurrentDatabase …: ask its Spark again next time
            self.whereabouts.forget(session_id)
        for msg in list_tables_here(plan):  # a catalog's root holds no tables: Spark's parser fails on its ''
            if self.whereabouts.get(session_id, user) == (user.catalog_name, ()):
                msg.ClearField("catalog")
                msg.sql.query = EMPTY_TABLE_LIST
        back: dict[str, str] = {}
        for msg in list(walk(plan)):
            name = msg.DESCRIPTOR.full_name
            if name == "spark.connect.SQL" or (name == "spark.connect.SqlCommand" and msg.sql):
                field_name = "query" if name == "spark.connect.SQL" else "sql"
                original = getattr(msg, field_name)
                out = rewriter.expand(original)
                if out.sql != original:
                    setattr(msg, field_name, out.sql)
                    back[out.sql] = original
            elif name == "spark.connect.Relation" and msg.WhichOneof("rel_type") == "read":
                read = msg.read
                if read.WhichOneof("read_type") != "named_table" or read.named_table.options or read.is_streaming:
                    continue
                out = rewriter.expand(f"SELECT * FROM {read.named_table.unparsed_identifier}")
                if out.catalogs:
                    common = msg.common if msg.HasField("common") else None
                    msg.ClearField("read")
                    msg.sql.query = out.sql
                    if common is not None:
                        msg.common.CopyFrom(common)
        return back

    def release_backend(self, session_id: str, principal: str) -> None:
        """End ``session_id`` in the JVM (its SparkSession, catalogs and vended credentials)."""
        req = self.pb.ReleaseSessionRequest(session_id=session_id, client_type="lakesession-engine")
        req.user_context.user_id = principal
        try:
            self._call("unary_unary", "ReleaseSession")(req.SerializeToString(), metadata=self._metadata, timeout=30)
        except grpc.RpcError as exc:  # already gone (never configured, or the JVM ended it): nothing to free
            logger.debug("release of an evicted session: %s", exc.code())

    def _abort(self, context: grpc.ServicerContext, exc: Exception) -> None:
        if isinstance(exc, SessionEnded):
            message = f"lakesession engine: your engine session ended ({exc}); run the query again to open a new one"
            context.abort_with_status(
                _status(grpc.StatusCode.FAILED_PRECONDITION, message, "session-ended", "INVALID_HANDLE.SESSION_CHANGED")
            )
        if isinstance(exc, Exhausted):
            logger.warning("%s", exc)
            context.abort_with_status(_status(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), exc.rule))
        if isinstance(exc, ExchangeRefused):
            why = str(exc).rstrip(".")
            fix = "" if "log in again" in why or "try again" in why else "; log in again"  # its own fix, if named
            message = f"lakesession engine: the issuer refused to let the engine act for you ({why}){fix}"
            context.abort_with_status(_status(grpc.StatusCode.UNAUTHENTICATED, message, "auth"))
        if isinstance(exc, CatalogUnavailable):
            message = f"lakesession engine: cannot act for you now: {exc}"
            context.abort_with_status(_status(grpc.StatusCode.UNAVAILABLE, message, "catalog-unavailable"))
        if isinstance(exc, CatalogRefusal):  # the catalog's 403, as Spark would have passed it on
            forbidden = "org.apache.iceberg.exceptions.ForbiddenException"
            context.abort_with_status(_status(grpc.StatusCode.PERMISSION_DENIED, str(exc), "catalog", cls=forbidden))
        if isinstance(exc, Unauthenticated):
            context.abort_with_status(_status(grpc.StatusCode.UNAUTHENTICATED, f"lakesession engine: {exc}", "auth"))
        if isinstance(exc, Refused):
            self.refusals += 1
            logger.info("refused: %s", exc)
            context.abort_with_status(_status(grpc.StatusCode.PERMISSION_DENIED, str(exc), exc.rule))
        if isinstance(exc, grpc.RpcError):  # the Connect server's own error: passed on as it is
            trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
            if trailing:
                context.set_trailing_metadata(trailing)
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            context.abort(code, exc.details() if hasattr(exc, "details") else "")
        raise exc

    # -- the methods ------------------------------------------------------------------------
    def execute_plan(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        pb = self.pb
        try:
            req = pb.ExecutePlanRequest.FromString(raw)
            user = self._admit(req, context)
            check_plan(req.plan, self._prefix())
            back = self._rewrite(req.plan, user, req.session_id)
            self.queries += 1
            user.queries += 1
            stream = self._call("unary_stream", "ExecutePlan")(req.SerializeToString(), metadata=self._metadata)
            for chunk in stream:
                yield self._map_back(chunk, back) if back else chunk
        except (*_HANDLED, grpc.RpcError) as exc:
            self._abort(context, exc)

    def _map_back(self, chunk: bytes, back: dict[str, str]) -> bytes:
        """A SQL command's result echoes the relation it ran: give it the user's own text back."""
        resp = self.pb.ExecutePlanResponse.FromString(chunk)
        if resp.WhichOneof("response_type") != "sql_command_result":
            return chunk
        changed = False
        for msg in walk(resp.sql_command_result):
            if msg.DESCRIPTOR.full_name == "spark.connect.SQL" and msg.query in back:
                msg.query = back[msg.query]
                changed = True
        return resp.SerializeToString() if changed else chunk

    def analyze_plan(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        pb = self.pb
        try:
            req = pb.AnalyzePlanRequest.FromString(raw)
            user = self._admit(req, context)
            check_plan(req, self._prefix())
            self._rewrite(req, user, req.session_id)
            result: bytes = self._call("unary_unary", "AnalyzePlan")(req.SerializeToString(), metadata=self._metadata)
            return result
        except (*_HANDLED, grpc.RpcError) as exc:
            self._abort(context, exc)
            raise

    def config(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        pb = self.pb
        try:
            req = pb.ConfigRequest.FromString(raw)
            self._admit(req, context)
            op = req.operation
            kind = op.WhichOneof("op_type")
            if kind == "set":
                self.policy.check_set(p.key for p in op.set.pairs)
            elif kind == "unset":
                self.policy.check_set(op.unset.keys)
            elif kind in ("get", "get_option"):
                self.policy.check_read(getattr(op, kind).keys)
            elif kind == "get_with_default":
                self.policy.check_read(p.key for p in op.get_with_default.pairs)
            result: bytes = self._call("unary_unary", "Config")(req.SerializeToString(), metadata=self._metadata)
            if kind != "get_all":
                return result
            resp = pb.ConfigResponse.FromString(result)
            kept = [p for p in resp.pairs if not self.policy.protected(p.key)]
            del resp.pairs[:]
            resp.pairs.extend(kept)
            return bytes(resp.SerializeToString())
        except (*_HANDLED, grpc.RpcError) as exc:
            self._abort(context, exc)
            raise

    def refuse_artifacts(self, request: Any, context: grpc.ServicerContext) -> bytes:
        try:
            self.auth.authenticate(context.invocation_metadata())
            raise Refused("artifacts", "uploading artifacts (jars, files, Python modules)")
        except (Unauthenticated, Refused) as exc:
            self._abort(context, exc)
            raise

    def refuse_clone(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            self.auth.authenticate(context.invocation_metadata())
            raise Refused("session", "cloning a session", "open a new session instead")
        except (Unauthenticated, Refused) as exc:
            self._abort(context, exc)
            raise

    def _passthrough(self, method: str, request_type: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        def handle(raw: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                req = getattr(self.pb, request_type).FromString(raw)
                user = self._admit(req, context)
                result: bytes = self._call("unary_unary", method)(req.SerializeToString(), metadata=self._metadata)
                if method == "ReleaseSession":
                    self.sessions.release(req.session_id, user.principal)
                    self.users.close_session(user, req.session_id)
                return result
            except (*_HANDLED, grpc.RpcError) as exc:
                self._abort(context, exc)
                raise

        return handle

    def reattach(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            req = self.pb.ReattachExecuteRequest.FromString(raw)
            self._admit(req, context)
            yield from self._call("unary_stream", "ReattachExecute")(req.SerializeToString(), metadata=self._metadata)
        except (*_HANDLED, grpc.RpcError) as exc:
            self._abort(context, exc)

    # -- serving ------------------------------------------------------------------------------
    def handler(self) -> grpc.GenericRpcHandler:
        uu = grpc.unary_unary_rpc_method_handler
        us = grpc.unary_stream_rpc_method_handler
        su = grpc.stream_unary_rpc_method_handler
        raw = {"request_deserializer": _identity, "response_serializer": _identity}
        methods = {
            "ExecutePlan": us(self.users.tracked(self.execute_plan, True), **raw),
            "AnalyzePlan": uu(self.users.tracked(self.analyze_plan, False), **raw),
            "Config": uu(self.users.tracked(self.config, False), **raw),
            "AddArtifacts": su(self.refuse_artifacts, **raw),
            "ArtifactStatus": uu(self.refuse_artifacts, **raw),
            "CloneSession": uu(self.refuse_clone, **raw),
            "ReattachExecute": us(self.users.tracked(self.reattach, True), **raw),
        }
        for method, request_type in (
            ("Interrupt", "InterruptRequest"),
            ("ReleaseExecute", "ReleaseExecuteRequest"),
            ("ReleaseSession", "ReleaseSessionRequest"),
            ("FetchErrorDetails", "FetchErrorDetailsRequest"),
        ):
            methods[method] = uu(self.users.tracked(self._passthrough(method, request_type), False), **raw)
        return grpc.method_handlers_generic_handler(SERVICE, methods)

    def server(self, address: str, *, workers: int = 64, credentials: Any = None) -> tuple[grpc.Server, int]:
        """A started gRPC server on ``address`` (``host:port``; port 0 picks one); returns it and its port."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=_SERVER_OPTIONS)
        server.add_generic_rpc_handlers([self.handler()])
        port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
        server.start()
        return server, port

    def close(self) -> None:
        self._channel.close()
