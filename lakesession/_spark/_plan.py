"""``StartPlan``: the steps of starting Spark for one Session, and which warm-ups run.

``Session.spark()`` reads what a start needs once (a frozen ``StartInput``), builds a plan from it and runs
it; the plan returns what it started (``Started``: the SparkSession, the gateway) and the Session takes it.
The plan never reads or sets the Session's fields. The order is the start-up's design in one place:

* ``launch`` (no Spark running here): resolve the jars, map the class-data-sharing archive
  (warm-up ``classcache``), launch the JVM — the critical path, so it starts first, in the caller's
  thread; the gateway starts meanwhile on another thread (it is I/O and little CPU). An embedded
  catalog begins only once the JVM is up: started beside it, its CPU-bound import work would compete
  with the JVM's launch for the same cores whenever they are few (``benchmarks/session_phases.py``
  shows the timeline; figures in ``benchmarks/RESULTS.md``). Then the catalog is registered on the
  session, and the warm-ups named in ``WARMUPS`` run in the background.
* ``running`` (a SparkContext is already up): a ``newSession()`` of it; nothing competes with a launch.
* ``connect`` (Spark Connect): a Connect session; the JVM is the server's.

Warm-ups only move work earlier or off the caller's path; each can be switched off
(``warmups=`` / ``LAKESESSION_WARMUPS``) and ``benchmarks/session_start.py`` measures the start with
them on and off, so a warm-up that stops paying shows there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SparkMissingError, UnknownWarmupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..embedded import EmbeddedStart
    from ..gateway import Gateway
    from ..session import Session

__all__ = ["WARMUPS", "WARMUPS_ENV", "StartInput", "StartPlan", "Started", "require_pyspark", "resolve_warmups"]

WARMUPS: Mapping[str, str] = {
    "classcache": "Map a class-data-sharing archive of the JVM's classes into later launches "
    "(written by the first start's JVM at exit; also off with `LAKESESSION_JVM_CLASS_CACHE=0`).",
    "catalog": "Load the session's catalog on a JVM thread as soon as Spark is up (Iceberg's REST client classes, "
    "GET /v1/config): Spark 3.5's first query, which loads the default catalog, overlaps it; Spark 4's first "
    "catalog query finds it loaded instead of spending ~1 s initializing it.",
    "embedded": "Once Spark is up, load at low OS priority what the embedded catalog's lazy start deferred "
    "(its routes, the SQL catalog, the S3 emulator) instead of at the first catalog query.",
}
WARMUPS_ENV = "LAKESESSION_WARMUPS"


def resolve_warmups(value: str | Sequence[str] | None) -> frozenset[str]:
    """The warm-ups to run: ``value`` (names, or a comma-separated string; ``Settings`` reads ``LAKESESSION_WARMUPS``),
    else all of them. ``none`` (or an empty list) runs none, ``all`` every one."""
    if value is None:
        value = "all"
    names = [n.strip().lower() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    if names == ["all"]:
        return frozenset(WARMUPS)
    if names == ["none"]:
        return frozenset()
    unknown = sorted(set(names) - set(WARMUPS))
    if unknown:
        raise UnknownWarmupError(
            f"unknown warm-up {', '.join(map(repr, unknown))}. Fix: name some of {', '.join(WARMUPS)} "
            f"(or 'all', or 'none') in warmups=... or {WARMUPS_ENV}"
        )
    return frozenset(names)


def require_pyspark(wanted: str = "Spark") -> None:
    """Raise ``SparkMissingError`` (one line, naming the install) unless pyspark imports: the catalog-only
    distribution has none, and a ``ModuleNotFoundError`` from deep inside the start says nothing of the fix."""
    try:
        import pyspark  # noqa: F401  (what every Spark start imports first anyway)
    except ImportError as exc:
        raise SparkMissingError(wanted, f"no module {exc.name!r}" if exc.name else str(exc)) from None


@dataclass(frozen=True)
class StartInput:
    """What starting Spark needs of one Session, read once by ``Session.spark()`` (nothing here reads it again).

    The plan decides from it and starts from it; it never reaches back into the Session, which takes what was
    started from the ``Started`` the plan returns."""

    holder: Session  # keys the process's Spark registry and the denials' (weakly); never read or set by the plan
    catalog_name: str
    warehouse: str | None
    access: str
    uri: str | None  # None while an embedded catalog is still starting
    token: Callable[[], str]  # the user's fresh access token (asks the catalog whether it offers raw paths)
    jars: Any
    master: str | None
    remote: str | None
    comet: bool
    clouds: frozenset[str] | None
    spark_conf: Mapping[str, str]
    warmups: frozenset[str]
    new_gateway: Callable[[], Gateway]  # starts a gateway for the session (called beside the JVM's launch)
    gateway: Gateway | None = None  # the session's, when it already has one
    pending: EmbeddedStart | None = None  # an embedded catalog still to begin or finish
    embedded: bool = False  # an embedded catalog (started) is behind the session


@dataclass(frozen=True)
class Started:
    """What a plan started, for the Session to own: its SparkSession and the gateway its catalog talks to."""

    spark: SparkSession
    gateway: Gateway


@dataclass(frozen=True)
class StartPlan:
    """How one Session's SparkSession comes up: which way (``mode``), what is still to start, which warm-ups."""

    mode: str  # "launch" | "running" | "connect"
    warmups: frozenset[str]
    start_gateway: bool  # the session has no gateway yet: it starts beside the JVM
    begin_embedded: bool  # an embedded catalog is still to begin
    embedded_after_jvm: bool = True  # it begins once the JVM is up (``_sparkbind.catalog_can_wait``)

    @classmethod
    def of(cls, start: StartInput) -> StartPlan:
        """The plan for ``start`` in this process now (a running SparkContext, Connect, or a launch)."""
        require_pyspark("session.spark()")
        from pyspark import SparkContext

        from .. import _sparkbind

        if start.remote is not None:
            mode = "connect"
        elif SparkContext._active_spark_context is not None:
            mode = "running"
        else:
            mode = "launch"
        pending = start.pending is not None
        after = _sparkbind.catalog_can_wait(start.remote)
        return cls(mode, start.warmups, start.gateway is None, pending, after)

    @property
    def steps(self) -> tuple[str, ...]:
        """The steps in order (``status()``, logs and the tests name them)."""
        beside = ("gateway (beside the JVM)",) if self.start_gateway else ()
        if self.mode == "connect":
            first: tuple[str, ...] = ("embedded catalog",) if self.begin_embedded else ()
            return (*first, *beside, "connect session", "catalog", *self._warm("embedded"))
        if self.mode == "running":
            first = ("embedded catalog",) if self.begin_embedded else ()
            return (*first, *beside, "new session", "catalog", "denials", *self._warm("embedded"))
        after = ("embedded catalog",) if self.begin_embedded else ()
        jvm = ("jars", *self._warm("classcache"), "launch JVM", *beside, *after)
        return (*jvm, *self._warm("catalog"), "catalog", "denials", *self._warm("embedded"))

    def _warm(self, name: str) -> tuple[str, ...]:
        return (f"warm-up {name}",) if name in self.warmups else ()

    def _raw_paths(self, start: StartInput, pool: ThreadPoolExecutor) -> Callable[[], bool] | None:
        """Whether the catalog offers credentials by path (then the JVM gets S3A: ``_rawpaths``), asked beside
        the jar resolution: the embedded catalog does; another answers its ``/v1/config`` (as the user)."""
        from .comet import names_comet

        if self.mode != "launch" or start.comet or names_comet(start.spark_conf):
            return None  # Comet's launch brings S3A itself
        if start.pending is not None or start.embedded:
            return lambda: True
        from . import _rawpaths

        if start.uri is None:
            return None
        asked = pool.submit(_rawpaths.probe, start.uri, start.token, start.warehouse)
        return asked.result

    def run(self, start: StartInput) -> Started:
        """Carry the plan out: a SparkSession with its catalog bound to the gateway (``start``'s, or one started
        beside the JVM). A start that fails stops the gateway it started: what it began, it leaves nothing of."""
        from .. import _sparkbind
        from .session import catalog_conf

        if self.mode == "launch":
            from .jars import check_java

            check_java()  # first: without a Java this Spark runs on, no jars (117 MB) are worth fetching
        pending = start.pending
        if pending is not None and not self.embedded_after_jvm:
            pending.begin()  # no JVM launch here to compete with: the catalog starts at once
        gateway = start.gateway
        with ThreadPoolExecutor(2, thread_name_prefix="lakesession-gateway") as pool:
            starting = pool.submit(start.new_gateway) if gateway is None else None
            raw_paths = self._raw_paths(start, pool)

            def conf() -> dict[str, str]:  # called once the JVM is up
                nonlocal gateway
                if pending is not None:
                    pending.begin()
                if starting is not None:
                    gateway = starting.result()
                assert gateway is not None
                own = catalog_conf(start.catalog_name, gateway.uri, gateway.secret, start.warehouse, start.access)
                comet = _sparkbind.comet_conf(
                    start.comet,
                    start.catalog_name,
                    gateway,
                    start.spark_conf,
                    storage_credentials=start.access != "remote-signing",
                )
                return {**own, **comet}

            try:
                spark = _sparkbind.bind(
                    start.holder,
                    start.catalog_name,
                    conf,
                    jars=start.jars,
                    spark_conf=start.spark_conf,
                    master=start.master,
                    remote=start.remote,
                    comet=start.comet,
                    warmups=self.warmups,
                    warehouse=start.warehouse,
                    clouds=start.clouds,
                    raw_paths=raw_paths,
                )
            except BaseException:
                if starting is not None:
                    _stop_quietly(starting)
                raise
            if starting is not None:
                gateway = starting.result()
        assert gateway is not None
        from . import _denials  # a job the store refuses is told as one error naming this session's table

        _denials.register(start.holder)  # Connect too: its gateway, and so its access log, is in this process
        if pending is not None and "embedded" in self.warmups:
            pending.warm_later()
        return Started(spark, gateway)


def _stop_quietly(starting: Future[Gateway]) -> None:
    """Stop a gateway started beside a launch that failed (the launch's error is the one to report)."""
    try:
        starting.result().stop()
    except Exception:  # it never started: nothing to stop
        pass
