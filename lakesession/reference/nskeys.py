"""How namespaces are stored, shown and mapped to storage paths: levels are a list, and may contain '.'.

Why one leaf module: the spec's namespace is a list of strings, so ``["a.b"]`` and ``["a", "b"]``
are different namespaces. Every table of the catalog that names a namespace (pyiceberg's
``iceberg_tables`` and ``iceberg_namespace_properties``, ``ls_views``, ``ls_locations``) stores the
*key*: the levels joined with the unit separator (0x1F, the spec's own URL separator). No level
may contain a control character, so the key is unambiguous; a child's key starts with its
parent's key + 0x1F, so "children of" is a range scan on the indexed column (``children_range``).

Storage paths keep the dot-joined form they always had (``{warehouse}/a.b`` for ``["a", "b"]``);
within a level, ``%`` and ``.`` are percent-encoded (``["a.b"]`` → ``{warehouse}/a%2Eb``), so no two
namespaces share a default location.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import and_

from .errors import BadRequest

Namespace = tuple[str, ...]

SEP = "\x1f"  # the spec's %1F: never inside a level (control characters are refused)
_AFTER_SEP = chr(ord(SEP) + 1)


def key(ns: Namespace) -> str:
    """The stored form of a namespace."""
    return SEP.join(ns)


def from_key(value: str | None) -> Namespace:
    """The namespace a stored key names (``""`` is the catalog root)."""
    return tuple(value.split(SEP)) if value else ()


def sql_ident(ns: Namespace, name: str) -> tuple[str, str]:
    """The identifier to hand pyiceberg's SqlCatalog: it joins levels with '.', so it gets one
    level, the key, and stores exactly that (its per-level ``strip`` is harmless: levels never
    begin or end with blanks, see ``check_level``)."""
    return (key(ns), name)


def path_text(parts: tuple[str, ...]) -> str:
    """A namespace (or namespace + name) as text, for messages and ``Securable`` strings: ``a.b`` when
    no part contains '.', else the JSON list ``["a.b", "c"]`` (also when a part begins with '[' or
    has outer blanks, so the two forms never collide and ``parse_path_text`` reads either)."""
    if any("." in p or p.startswith("[") or p != p.strip() for p in parts):
        return json.dumps(list(parts), ensure_ascii=False)
    return ".".join(parts)


def parse_path_text(text: str) -> tuple[str, ...] | None:
    """The inverse of ``path_text``; None when the text is not a well-formed name."""
    text = text.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            return None
        return tuple(value)
    return tuple(text.split(".")) if text else ()


def path_segment(ns: Namespace) -> str:
    """The namespace's directory under the warehouse: levels joined with '.', each level's '%' and
    '.' percent-encoded — unchanged for dot-free levels, and injective (["a.b"] ≠ ["a", "b"])."""
    return ".".join(level.replace("%", "%25").replace(".", "%2E") for level in ns)


def check_level(level: str) -> str:
    """A namespace level: printable, not blank, no leading or trailing blank (pyiceberg's SqlCatalog
    strips them), no '/', not '.' or '..', at most 255 characters. '.' inside a level is fine."""
    if (
        not level
        or not level.strip()
        or level != level.strip()
        or not level.isprintable()
        or "/" in level
        or level in (".", "..")
        or len(level) > 255
    ):
        raise BadRequest(
            f"Invalid namespace level {level!r}: levels must be printable, not blank, without leading or "
            "trailing blanks, at most 255 characters, without '/', and not '.' or '..'"
        )
    return level


def children_range(column: Any, ns: Namespace, dialect: str) -> Any:
    """``column`` holds a strict descendant of ``ns`` (the root ``()``: any namespace): a range on the
    key, so an index on the column serves it. It needs byte order: SQLite's BINARY collation, and on
    PostgreSQL the "C" collation (a linguistic one may sort 0x1F anywhere)."""
    if not ns:
        return column.isnot(None)
    col = column.collate("C") if dialect == "postgresql" else column
    return and_(col >= key(ns) + SEP, col < key(ns) + _AFTER_SEP)
