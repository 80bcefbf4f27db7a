"""A Spark job the object store refused, as one readable ``StorageAccessError`` naming the table.

An executor whose write the store refuses (read-only keys, revoked, expired) fails its task with the
AWS SDK's ``S3Exception: Access Denied (Service: S3, Status Code: 403, …)``; the driver aborts the job
and pyspark raises a ``Py4JJavaError`` of hundreds of lines. The S3 error names no table (nor, for the
SDK, even the object), so the table comes from what this process's gateways know: which table each
Session loaded (and had credentials vended for) last before the failure, and whether the catalog has
since refused it (a revoked grant). The principal is that Session's identity.

``spark_denial`` is called from ``lakesession._spark.errors.explain`` for every Spark failure (classic or
Connect) that is no Iceberg REST error; it returns None for anything that is no store refusal.
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import TYPE_CHECKING, Any

from ..credentials._denials import DELETE, READ, WRITE, Denial, likely_cause, parse_denial, storage_error
from ..errors import StorageAccessError as _StorageAccessError
from ._chain import Chain, SparkSideError
from ._sparklog import written_log

if TYPE_CHECKING:
    from ..session import Session  # read: its access log, identity, whether closed


_sessions: weakref.WeakSet[Session] = weakref.WeakSet()
S3_MARKERS = ("S3Exception", "Service: S3", "AccessDeniedException", "s3a://", "AwsServiceException")
LOOKBACK_SECONDS = 900.0  # loads older than this are no suspects (a job longer than this reloads its tables)
_LOADS = ("load_table", "create_table")


class StorageAccessError(_StorageAccessError, SparkSideError):
    """The object store refused a Spark job's read or write; ``str()`` is one line naming the table.

    Both a ``lakesession.errors.StorageAccessError`` (``except LakesessionError`` catches it) and pyspark's
    ``CapturedException``. pyspark raises it ``from None``, so a traceback (``logging.exception``, a
    script's) is a few lines: the original ``Py4JJavaError`` is ``java_error`` (its Java trace is there
    for whoever wants it), and ``log`` the Spark log file holding Spark's own lines about the failure.
    """

    def __init__(self, message: str, **fields: Any):
        SparkSideError.__init__(self, message)
        self.java_error: BaseException | None = None
        self.log: str | None = None
        for key in ("table", "operation", "principal", "reason", "code", "path"):
            setattr(self, key, fields.get(key))


def sessions() -> list[Session]:
    """The open Sessions whose Spark runs in this process (for explaining their failures)."""
    return [s for s in list(_sessions) if not s.closed]


def register(session: Session) -> None:
    """Let failures of Spark jobs be attributed to ``session``'s tables (called once its SparkSession is bound)."""
    _sessions.add(session)


def _operation(text: str) -> str:
    """What the failed I/O did, from Iceberg's and Hadoop's stack frames in ``text``."""
    if "S3OutputStream" in text or "S3ABlockOutputStream" in text or "putObject" in text:
        return WRITE
    if "deleteFile" in text or "deleteObject" in text:
        return DELETE
    return READ


def _suspect(now: float) -> tuple[Session, str, bool, list[str]] | None:
    """The Session and table whose load came last before ``now``, whether the catalog has since refused
    that table (a revoked grant), and the other tables loaded shortly before it."""
    best: tuple[float, Session, str] | None = None
    for session in list(_sessions):
        if session.closed:
            continue
        for r in session.access_log.records(since=now - LOOKBACK_SECONDS):
            if r.action in _LOADS and r.status == 200 and r.object.startswith("table "):  # chain loads too
                if best is None or r.last >= best[0]:
                    best = (r.last, session, r.object)
    if best is None:
        return None
    at, session, obj = best
    records = session.access_log.records(since=at - 30)
    latest = [r for r in records if r.object == obj]
    revoked = bool(latest) and latest[-1].status in (401, 403)
    others = sorted(
        {r.object[len("table ") :] for r in records if r.action in _LOADS and r.status == 200 and r.object != obj}
    )
    return session, obj[len("table ") :], revoked, [o for o in others if o]


def spark_denial(chain: Chain) -> StorageAccessError | None:
    """A Spark failure as a ``StorageAccessError`` when it is the object store's refusal, else None."""
    text = chain.text
    code = next((link.code for link in chain.links if link.code), None)
    if not any(marker in text for marker in S3_MARKERS):
        return None
    operation = _operation(text)
    denial = parse_denial(f"Error Code: {code} {text}" if code else text, operation=operation)
    if denial is None:
        return None
    denial = Denial(denial.code, denial.operation or operation, denial.request, denial.path)
    suspect = _suspect(time.time())
    table = principal = None
    revoked = False
    also: list[str] = []
    if suspect is not None:
        session, table, revoked, also = suspect
        principal = getattr(session._identity, "principal", None)
    err = storage_error(denial, table=table, principal=principal, cause=likely_cause(denial, revoked=revoked))
    message = str(err)
    if also:
        message = message.replace(f"table {table}", f"table {table} (also loaded: {', '.join(also)})", 1)
    log = written_log() if chain.origin is not None else None  # a Connect server's log is not this process's
    if log is not None:
        message = f"{message} (Spark's log of it: {log})"
    spark_err = StorageAccessError(
        message,
        table=table,
        operation=err.operation,
        principal=principal,
        reason=err.reason,
        code=err.code,
        path=err.path,
    )
    handled = sys.exc_info()[1]  # pyspark converts inside ``except Py4JJavaError``: that is the original
    java = getattr(handled, "java_exception", None)
    if java is not None and getattr(java, "_target_id", None) == getattr(chain.origin, "_target_id", object()):
        spark_err.java_error = handled
    spark_err.log = str(log) if log is not None else None
    return spark_err
