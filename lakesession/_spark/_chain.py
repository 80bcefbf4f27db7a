"""A Spark failure's cause chain as plain data, read the same from a classic JVM and from Spark Connect.

A classic session's error is a py4j reference to a JVM ``Throwable``; a Spark Connect session's arrives over
gRPC with the server's cause chain (each cause's class hierarchy, message and frames). Both become a
``Chain`` here, so one set of rules (``lakesession._spark.errors``) explains both: the same newcomer's
mistake reads the same line whichever way the user's Spark runs.

Also ``SparkSideError``: the base of lakesession's errors raised from Spark. They are pyspark's
``CapturedException`` too (pyspark's handlers still match), built without a JVM reference, so asking them
for an error condition works in a Connect client (pyspark's own methods assert a py4j gateway).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.errors.exceptions import captured
from pyspark.errors.exceptions.base import PySparkException

from ..errors import LakesessionError

_MAX_CAUSES = 20  # a cause chain is never longer in practice; a cyclic one stops here


@dataclass(frozen=True)
class Link:
    """One exception of the chain: its class and superclasses (most specific first) and its message."""

    classes: tuple[str, ...]
    message: str
    code: str | None = None  # the S3 error code the AWS SDK parsed (classic sessions only)

    @property
    def name(self) -> str:
        return self.classes[0] if self.classes else ""

    def is_a(self, cls: str) -> bool:
        return cls in self.classes


@dataclass(frozen=True)
class Chain:
    """The failure and its causes; ``text`` is all of it as Java prints it (classes, messages, frames)."""

    links: tuple[Link, ...]
    text: str
    origin: Any = None  # the py4j Throwable of a classic session (None for Spark Connect)

    @property
    def messages(self) -> list[str]:
        return [link.message for link in self.links]


def _hierarchy(e: Any) -> tuple[str, ...]:
    names: list[str] = []
    cls = e.getClass()
    while cls is not None and len(names) < 12:
        names.append(str(cls.getName()))
        cls = cls.getSuperclass()
    return tuple(names)


def _sdk_code(e: Any, name: str) -> str | None:
    if not (name.endswith("S3Exception") or name.endswith("AwsServiceException")):
        return None
    try:
        return str(e.awsErrorDetails().errorCode() or "") or None
    except Exception:  # an SDK without awsErrorDetails, or no details
        return None


def from_java(e: Any) -> Chain:
    """A classic session's JVM ``Throwable`` (py4j) as a ``Chain``."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    text = str(jvm.org.apache.spark.util.Utils.exceptionString(e)) if jvm is not None else str(e.toString())
    links: list[Link] = []
    origin = e
    while e is not None and len(links) < _MAX_CAUSES:
        classes = _hierarchy(e)
        links.append(Link(classes, str(e.getMessage() or ""), _sdk_code(e, classes[0])))
        e = e.getCause()
    return Chain(tuple(links), text, origin)


def from_connect(info: Any, message: str, resp: Any) -> Chain:
    """A Spark Connect error (gRPC ``ErrorInfo``, its message, the fetched error details if any) as a ``Chain``."""
    links: list[Link] = []
    text: list[str] = []
    errors = list(resp.errors) if resp is not None else []
    index: int | None = 0 if errors else None
    while index is not None and index < len(errors) and len(links) < _MAX_CAUSES:
        err = errors[index]
        link = Link(tuple(err.error_type_hierarchy), str(err.message))
        links.append(link)
        frames = "".join(f"\n\tat {f.declaring_class}.{f.method_name}" for f in err.stack_trace)
        text.append(f"{link.name}: {link.message}{frames}")
        index = err.cause_idx if err.HasField("cause_idx") else None
    if not links:  # no details fetched: the top error's classes and its (truncated) message
        raw = info.metadata.get("classes") if info is not None else None
        classes = tuple(json.loads(raw)) if raw else ()
        said = (message or "").removeprefix(f"{classes[0]}: " if classes else "")
        links.append(Link(classes, said))
        text.append(f"{links[0].name}: {said}")
    return Chain(tuple(links), "\nCaused by: ".join(text))


class SparkSideError(LakesessionError, captured.CapturedException):
    """A lakesession error raised from Spark: one line, no JVM reference (works in a Connect client too)."""

    def __init__(self, message: str):
        # not CapturedException.__init__: it wants a live JVM reference, which a Connect client has not
        PySparkException.__init__(self, message=message)
        self.desc = self._desc = message  # "desc": what pyspark 3.5 called it
        self._stackTrace, self._cause, self._origin = "", None, None

    def __str__(self) -> str:
        return self.desc

    # pyspark's versions of these assert a py4j gateway and read ``_origin``: there is none to ask
    def getCondition(self) -> str | None:
        return None

    def getErrorClass(self) -> str | None:
        return None

    def getMessageParameters(self) -> dict[str, str] | None:
        return None

    def getSqlState(self) -> str | None:
        return None

    def getQueryContext(self) -> list[Any]:
        return []
