"""The session's access log: what the engine loaded, created, committed and dropped through the gateway."""

from __future__ import annotations

import re
import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import unquote

_OBJECT = re.compile(
    r"^/v1/(?:[^/]+/)?namespaces/(?P<ns>[^/]+)(?:/(?P<kind>tables|views)/(?P<name>[^/]+)(?P<rest>/.*)?)?$"
)
_RENAME = re.compile(r"^/v1/(?:[^/]+/)?(?P<kind>tables|views)/rename$")


@dataclass(frozen=True)
class AccessRecord:
    time: float
    action: str  # load_table, create_table, commit_table, drop_table, load_view, ..., refresh_credentials
    object: str  # "table sales.orders"
    status: int
    duration_ms: float
    request_id: str | None = None
    credentials_expire_at: float | None = None
    via: str | None = None  # upstream, cache, shared (how a credential refresh was served)
    chain: str | None = None  # the view chain the load went through ("sales.v1 → sales.v2")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def classify(method: str, path: str) -> tuple[str, str] | None:
    """(action, object) for requests worth auditing; None for listings and config."""
    m = _RENAME.match(path)
    if m and method == "POST":
        return f"rename_{m['kind'][:-1]}", m["kind"][:-1]
    m = _OBJECT.match(path)
    if not m or not m["kind"]:
        return None
    ns = unquote(m["ns"]).replace("\x1f", ".")
    kind = m["kind"][:-1]
    name = unquote(m["name"])
    obj = f"{kind} {ns}.{name}"
    rest = m["rest"] or ""
    if rest == "/credentials":
        return "refresh_credentials", obj
    if rest:
        return None  # metrics, plan, sign...
    action = {"GET": "load", "HEAD": "exists", "POST": "commit", "DELETE": "drop"}.get(method)
    return (f"{action}_{kind}", obj) if action and action != "exists" else None


class AccessLog:
    """A bounded, thread-safe, in-memory log of one session's catalog accesses."""

    def __init__(self, maxlen: int = 10_000):
        self._records: deque[AccessRecord] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def add(self, record: AccessRecord) -> None:
        with self._lock:
            self._records.append(record)

    def records(self, since: float | None = None) -> list[AccessRecord]:
        with self._lock:
            out = list(self._records)
        return [r for r in out if since is None or r.time >= since]

    def __len__(self) -> int:
        return len(self._records)
