"""The ``referenced-by`` query parameter (Iceberg REST ``loadTable``/``loadView``): one codec for both halves.

A value is a comma-separated list of view identifiers, outermost view first. Each identifier is its
namespace levels and view name joined by the namespace separator (``%1F`` unless the catalog's
``/v1/config`` says otherwise), then percent-encoded as a whole, so ``%2C`` is a comma inside a name.
Parsing therefore splits on ``,`` *before* decoding: servers must read the raw query string.
"""

from __future__ import annotations

from urllib.parse import quote, unquote, unquote_plus

PARAM = "referenced-by"
DEFAULT_SEPARATOR = "%1F"

ViewId = tuple[tuple[str, ...], str]


class MalformedReferencedBy(ValueError):
    """A ``referenced-by`` value or chain that cannot be encoded or parsed; the message says which view."""


def separator(configured: str = DEFAULT_SEPARATOR) -> str:
    """The separator as a character: the spec gives it percent-encoded (``%1F``)."""
    return unquote(configured) if "%" in configured else configured


def encode(chain: list[ViewId], configured_separator: str = DEFAULT_SEPARATOR) -> str:
    """The raw value for ``chain`` (``[(namespace, view), …]``, outermost first)."""
    sep = separator(configured_separator)
    parts = []
    for namespace, name in chain:
        if not namespace:
            raise MalformedReferencedBy(f"view {name!r} has no namespace: referenced-by needs namespace and view name")
        parts.append(quote(sep.join((*namespace, name)), safe=""))
    return ",".join(parts)


def decode(raw: str, configured_separator: str = DEFAULT_SEPARATOR) -> list[ViewId]:
    """The chain in a raw (still percent-encoded) value; empty for an empty value.

    Structure only (each view has a namespace and a name); what a level or name may contain is the
    catalog's rule to add."""
    if not raw.strip():
        return []
    sep = separator(configured_separator)
    out: list[ViewId] = []
    for i, part in enumerate(raw.split(","), 1):
        levels = unquote_plus(part).split(sep)
        if len(levels) < 2:
            raise MalformedReferencedBy(
                f"view {i} ({unquote_plus(part)!r}) needs a namespace and a name joined by the namespace separator"
            )
        out.append((tuple(levels[:-1]), levels[-1]))
    return out


def names_param(part: str) -> bool:
    """Whether a raw ``&``-separated query part could be read as ``referenced-by`` by some server:
    any ``;``-separated piece (old parsers split on it) whose key, decoded up to three times and
    case-folded, is the parameter."""
    for piece in part.split(";"):
        key = piece.partition("=")[0]
        for _ in range(3):
            if key.strip().lower() == PARAM:
                return True
            decoded = unquote_plus(key)
            if decoded == key:
                break
            key = decoded.partition("=")[0]
    return False


def strip(query: str) -> str:
    """``query`` without any ``referenced-by`` parameter however spelled (raw, order kept)."""
    return "&".join(p for p in query.split("&") if p and not names_param(p))


def replace(query: str, raw_value: str) -> str:
    """``query`` with ``referenced-by`` set to ``raw_value`` (already encoded), replacing any other."""
    rest = strip(query)
    return (rest + "&" if rest else "") + f"{PARAM}={quote(raw_value, safe='%,')}"
