"""Plain-HTML renderings of a session's views: what widgets show, and the fallback where there are none.

Everything here takes the session's *secret-free* views (``Session.status()``, ``grants()``,
``credentials()``, ``audit()``, a ``ChainNode``) and escapes every value, so no renderer can
leak a token or key even by accident: they never see one.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

STATE_COLORS = {
    "valid": "#2e7d32",
    "refreshing": "#1565c0",
    "revoked": "#c62828",
    "failed": "#c62828",
    "expired": "#ef6c00",
    "unknown": "#757575",
    "starting": "#757575",
}
DECISION_COLORS = {"allow": "#2e7d32", "deny": "#c62828"}
_STYLE = (
    "<style>.lakesession-table{border-collapse:collapse;font-size:90%}"
    ".lakesession-table th,.lakesession-table td{border-bottom:1px solid #ddd;padding:2px 8px;text-align:left}"
    ".lakesession-badge{color:#fff;border-radius:3px;padding:0 5px;font-size:85%}</style>"
)


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def duration(seconds: float | None) -> str:
    """``"4 min 05 s"``-style text for a countdown (``"unknown"`` when there is no expiry)."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "unknown"
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def badge(text: str, color: str | None = None) -> str:
    color = color or STATE_COLORS.get(text, "#455a64")
    return f'<span class="lakesession-badge" style="background:{color}">{esc(text)}</span>'


def status_html(status: Mapping[str, Any], now: float | None = None) -> str:
    """Who the session acts as, where, and when the token expires (class ``lakesession-status``)."""
    now = time.time() if now is None else now
    if status.get("state") == "starting":
        return (
            '<div class="lakesession-status"><b>lakesession</b>: starting the embedded catalog… '
            "(principal unknown yet; token expires in unknown)</div>"
        )
    ident = status.get("identity") or {}
    exp = ident.get("expires_at")
    left = None if exp is None else exp - now
    creds = status.get("credentials") or []
    states: dict[str, int] = {}
    for row in creds:
        states[row.get("state") or "unknown"] = states.get(row.get("state") or "unknown", 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none yet"
    return (
        '<div class="lakesession-status" style="font-family:sans-serif;line-height:1.5">'
        f"<b>{esc(ident.get('principal') or 'not logged in')}</b> "
        f'<span style="color:#666">({esc(ident.get("kind") or "?")} via {esc(ident.get("issuer") or "?")})</span> — '
        f'token expires in <b class="lakesession-expiry">{esc(duration(left))}</b><br>'
        f"catalog <code>{esc(status.get('catalog_name'))}</code> at <code>{esc(status.get('uri'))}</code>"
        f"{' · Spark running' if status.get('spark') else ''} · table credentials: {esc(summary)}</div>"
    )


def table_html(
    rows: Iterable[Mapping[str, Any]], columns: list[str], cls: str, empty: str = "nothing yet", cell: Any = None
) -> str:
    """An escaped HTML table; ``cell(column, value)`` may return ready HTML for special columns."""
    rows = list(rows)
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    if not rows:
        return (
            f'{_STYLE}<table class="lakesession-table {cls}"><tr>{head}</tr><tr><td colspan="{len(columns)}">'
            f"<i>{esc(empty)}</i></td></tr></table>"
        )
    body = []
    for row in rows:
        tds = []
        for c in columns:
            custom = cell(c, row.get(c)) if cell is not None else None
            tds.append(f"<td>{custom if custom is not None else esc(_plain(row.get(c)))}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f'{_STYLE}<table class="lakesession-table {cls}"><tr>{head}</tr>{"".join(body)}</table>'


def _plain(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if hasattr(value, "isoformat"):
        try:
            return value.strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:  # NaT
            return ""
    return value


def grants_html(rows: Iterable[Mapping[str, Any]]) -> str:
    return table_html(rows, ["securable", "privileges", "granted", "roles"], "lakesession-grants", "no grants")


def credentials_html(rows: Iterable[Mapping[str, Any]], now: float | None = None) -> str:
    """Per-table credential state with a countdown computed at ``now``."""
    now = time.time() if now is None else now

    def cell(col: str, value: Any) -> str | None:
        if col == "state":
            return badge(value or "unknown")
        return None

    out = []
    for r in rows:
        exp = r.get("expires_at")
        left = None if exp is None or (isinstance(exp, float) and math.isnan(exp)) else max(0.0, exp - now)
        out.append({**r, "expires in": duration(left)})
    return table_html(
        out,
        ["engine", "table", "mode", "state", "expires in", "refreshes", "last_error"],
        "lakesession-credentials",
        "no table credentials yet: read a table first",
        cell,
    )


def audit_html(rows: Iterable[Mapping[str, Any]]) -> str:
    def cell(col: str, value: Any) -> str | None:
        if col == "decision":
            return badge(str(value), DECISION_COLORS.get(str(value), "#ef6c00"))
        return None

    return table_html(
        rows,
        ["time", "action", "object", "via_chain", "ran_on", "decision", "credentials_expire_at"],
        "lakesession-audit",
        "no accesses recorded",
        cell,
    )


def timeline_svg(points: list[tuple[float, str, str]], width: int = 560, height: int = 70) -> str:
    """A small inline-SVG timeline: one tick per access at its time, coloured by decision.

    ``points`` are ``(epoch seconds, decision, label)``; no plotting library needed.
    """
    if not points:
        return '<svg class="lakesession-timeline" width="0" height="0"></svg>'
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    span = max(t1 - t0, 1e-3)
    pad = 10
    marks = []
    for t, decision, label in points:
        x = pad + (t - t0) / span * (width - 2 * pad)
        color = DECISION_COLORS.get(decision, "#ef6c00")
        marks.append(
            f'<line x1="{x:.1f}" y1="15" x2="{x:.1f}" y2="45" stroke="{color}" stroke-width="2">'
            f"<title>{esc(label)}</title></line>"
        )
    fmt = "%H:%M:%S"
    return (
        f'<svg class="lakesession-timeline" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        f'<line x1="{pad}" y1="45" x2="{width - pad}" y2="45" stroke="#999"/>{"".join(marks)}'
        f'<text x="{pad}" y="62" font-size="10">{esc(time.strftime(fmt, time.localtime(t0)))}</text>'
        f'<text x="{width - pad}" y="62" font-size="10" text-anchor="end">'
        f"{esc(time.strftime(fmt, time.localtime(t1)))}</text></svg>"
    )


def error_html(message: str) -> str:
    return f'<div class="lakesession-error" style="color:#c62828"><b>lakesession:</b> {esc(message)}</div>'


class HTML:
    """A display object with HTML and a plain-text fallback (for scripts, consoles and nbval)."""

    def __init__(self, html_text: str, text: str):
        self.html, self.text = html_text, text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text
