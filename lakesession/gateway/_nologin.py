"""The gateway's "no usable login" answer, and the identity error behind it for whoever raises it again.

When the user's token cannot be had for a reason only the user can fix (``invalid_scope``, a dead login),
the gateway answers the JVM 401 with the identity error's message. Iceberg turns that into
``NotAuthorizedException("Not authorized: …")``; Spark's error conversion (``lakesession._spark.errors``)
finds the marker below in it and raises the same class Python raises for the same cause (``ScopeError``,
``LoginRequiredError`` …), with the original's fields when this process's gateway answered.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

from ..errors import IdentityError, LakesessionError

MARKER = "lakesession has no usable login"
_FOUND = re.compile(re.escape(MARKER) + r" \((\w+)\): (.*)", re.DOTALL)
_recent: OrderedDict[str, IdentityError] = OrderedDict()
_lock = threading.Lock()
KEEP = 16


def no_login_message(exc: IdentityError) -> str:
    """The 401's message (secret-free: identity errors are by contract), remembered with ``exc``."""
    message = f"{MARKER} ({type(exc).__name__}): {exc}"
    with _lock:
        _recent[str(exc)] = exc
        _recent.move_to_end(str(exc))
        while len(_recent) > KEEP:
            _recent.popitem(last=False)
    return message


def found_no_login(text: str) -> tuple[str, str, IdentityError | None] | None:
    """(the identity error's class name, its message, the original when this process raised it) in ``text``."""
    match = _FOUND.search(text)
    if match is None:
        return None
    name, message = match.group(1), match.group(2).strip()
    with _lock:
        original = _recent.get(message)
    return name, message, original if original is not None and type(original).__name__ == name else None


#: the gateway's 400 for an address this session never reached (the catalog's, or where tokens come from): a
#: wrong address, not an outage, so an answer Iceberg does not retry (it retries 429/502/503/504), in one line
UNREACHED = "lakesession never reached it"
_UNREACHED = re.compile(re.escape(UNREACHED) + r" \((\w+)\): ([^\n]*)")


def unreached_message(exc: LakesessionError) -> str:
    """The 400's message: the class Python raises for it, and its (secret-free) one line."""
    return f"{UNREACHED} ({type(exc).__name__}): {exc}"


def found_unreached(text: str) -> tuple[str, str] | None:
    """(the class name, its message) of an address never reached, in ``text`` (an Iceberg exception's)."""
    match = _UNREACHED.search(text)
    return None if match is None else (match.group(1), match.group(2).strip())
