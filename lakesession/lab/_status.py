"""Status files shared by the kernel-side publisher and the server extension (stdlib only).

A status file is ``<runtime dir>/lakesession/kernel-<kernel id>.json``, mode 0600, written
atomically. Both sides pass documents through ``scrub`` so that nothing secret-looking (by key
name, or a JWT-shaped value) can reach the browser even if a session's status grew one by mistake.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SUBDIR = "lakesession"
_KERNEL_FILE = re.compile(r"^kernel-(?P<id>[A-Za-z0-9][A-Za-z0-9_.-]*)\.json$")
_SECRET_KEY = re.compile(
    r"secret|token|password|passwd|private|access[-_.]?key|session[-_.]?key|credential$|"
    r"authorization|cookie|signature",
    re.IGNORECASE,
)
_ALLOWED_KEYS = frozenset({"credentials"})  # the rows list, not a secret
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.")
MAX_BYTES = 1 << 20


def status_dir(runtime_dir: str | os.PathLike[str]) -> Path:
    return Path(runtime_dir) / SUBDIR


def status_file(runtime_dir: str | os.PathLike[str], kernel_id: str) -> Path:
    return status_dir(runtime_dir) / f"kernel-{kernel_id}.json"


def kernel_id_of(path: str | os.PathLike[str]) -> str | None:
    """``abc`` for ``.../kernel-abc.json`` (connection files and status files share the naming)."""
    m = _KERNEL_FILE.match(Path(path).name)
    return m.group("id") if m else None


def is_secret_key(key: str) -> bool:
    return key not in _ALLOWED_KEYS and bool(_SECRET_KEY.search(key))


def scrub(value: Any) -> Any:
    """``value`` without secret-named keys or token-shaped strings (recursively)."""
    if isinstance(value, dict):
        return {str(k): scrub(v) for k, v in value.items() if not is_secret_key(str(k))}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    if isinstance(value, str) and _JWT.search(value):
        return "***"
    if isinstance(value, float) and math.isnan(value):  # NaN is not JSON
        return None
    return value


def write_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as JSON to ``path`` (mode 0600, directory 0700), replacing it atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = json.dumps(scrub(doc), default=str, separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)  # mkstemp creates 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_entries(runtime_dir: str | os.PathLike[str], running: Iterable[str]) -> list[dict[str, Any]]:
    """The status documents of the ``running`` kernels (files of other kernels are ignored)."""
    wanted = set(running)
    directory = status_dir(runtime_dir)
    out: list[dict[str, Any]] = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("kernel-*.json")):
        kid = kernel_id_of(path)
        if kid is None or kid not in wanted:
            continue
        try:
            if path.stat().st_size > MAX_BYTES:
                continue
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced, or garbage: the next poll will see it
        if isinstance(doc, dict):
            doc = scrub(doc)
            doc["kernel_id"] = kid
            out.append(doc)
    return out
