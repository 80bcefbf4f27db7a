"""ipywidgets 8 views of a session: identity header, grants, live credentials, audit, view chain.

Live widgets (status, credentials) update their traits from a background ticker, so a
countdown moves without re-running the cell; the ticker stops when the widget is closed,
and an error in an update is shown in the widget and logged — it never kills the ticker
silently. Each widget's ``_repr_mimebundle_`` also carries the HTML fallback, so saved
notebooks, nbval and static renderers show the same content. Only secret-free session
views are read (see ``_html``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..errors import ConfigError
from . import _html

if TYPE_CHECKING:
    from ..session import Session

log = logging.getLogger("lakesession.notebook")

TICK_SECONDS = 1.0


class Ticker:
    """Calls ``fn`` every ``interval`` seconds on a daemon thread until ``stop()``.

    Errors are logged and passed to ``on_error`` (shown in the widget); the loop goes on, so
    a transient failure (catalog down) heals by itself on a later tick.
    """

    def __init__(self, fn: Callable[[], None], interval: float, on_error: Callable[[Exception], None], name: str):
        self.fn, self.interval, self.on_error = fn, interval, on_error
        self.errors = 0
        self.ticks = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.fn()
                self.ticks += 1
            except Exception as exc:  # never die silently: show, log, keep ticking
                self.errors += 1
                log.warning("lakesession widget update failed: %s", one_line(exc))
                try:
                    self.on_error(exc)
                except Exception:  # pragma: no cover - the error display itself failed
                    log.exception("lakesession widget could not show an update error")

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self) -> None:
        self._stop.set()


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "…"


class _Panel(widgets.VBox):
    """A VBox with an error line, an optional ticker and an HTML fallback in its mime bundle."""

    title = "lakesession"

    def __init__(self, session: Session, interval: float | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.session = session
        self.error = widgets.HTML("")
        self._lock = threading.RLock()
        self._local = threading.local()  # "inside update" flag: listeners fired by an update do not recurse
        self._cleanups: list[Callable[[], None]] = []
        self.ticker: Ticker | None = None
        self.add_class("lakesession-widget")
        self.update()
        if interval:
            self.ticker = Ticker(self.tick, interval, self.show_error, f"lakesession-{type(self).__name__}")

    def update(self) -> None:
        """Re-read the session and set the widget traits (thread-safe)."""
        if getattr(self._local, "busy", False):
            return
        with self._lock:
            self._local.busy = True
            try:
                self._update()
            finally:
                self._local.busy = False
            self.error.value = ""

    def tick(self) -> None:
        """One ticker step (default: ``update()``)."""
        self.update()

    def _update(self) -> None:
        raise NotImplementedError

    def show_error(self, exc: Exception) -> None:
        self.error.value = _html.error_html(f"could not update: {one_line(exc)}")

    def fallback_html(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
        for fn in self._cleanups:
            fn()
        self._cleanups.clear()
        super().close()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = f"<{self.title}>"
        try:
            bundle["text/html"] = self.fallback_html()
        except Exception as exc:  # the widget view still renders; the fallback says why it could not
            bundle["text/html"] = _html.error_html(one_line(exc))
        return bundle


class StatusWidget(_Panel):
    """Identity header: principal, issuer, token expiry countdown, catalog, credential summary."""

    title = "lakesession status"

    def __init__(self, session: Session, interval: float | None = TICK_SECONDS):
        self.header = widgets.HTML("")
        self.last_status: dict[str, Any] = {}
        super().__init__(session, interval)
        self.children = (self.header, self.error)

    def _update(self) -> None:
        self.last_status = self.session.reports.status()
        self.header.value = _html.status_html(self.last_status)

    @property
    def seconds_left(self) -> float | None:
        exp = (self.last_status.get("identity") or {}).get("expires_at")
        return None if exp is None else exp - time.time()

    def fallback_html(self) -> str:
        return self.header.value or _html.status_html(self.session.reports.status())


class GrantsTable(_Panel):
    title = "lakesession grants"

    def __init__(self, session: Session):
        self.table = widgets.HTML("")
        super().__init__(session)
        self.children = (widgets.HTML("<b>Your grants</b>"), self.table, self.error)

    def _update(self) -> None:
        self.table.value = _html.grants_html(self.session.reports.grants().to_dict("records"))

    def fallback_html(self) -> str:
        return self.table.value


class CredentialRow:
    """One table's credential line: name, countdown bar, seconds left, state badge, refresh count."""

    def __init__(self, engine: str, table: str):
        self.table = widgets.Label(f"{table} ({engine})", layout=widgets.Layout(width="32%"))
        self.countdown = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="25%"))
        self.left = widgets.Label("", layout=widgets.Layout(width="14%"))
        self.state = widgets.HTML("")
        self.refreshes = widgets.Label("")
        self.state_name = "unknown"
        self._expires_at: float | None = None
        self.box = widgets.HBox([self.table, self.countdown, self.left, self.state, self.refreshes])

    def set(self, row: dict[str, Any], now: float) -> None:
        exp = row.get("expires_at")
        exp = None if exp is None or exp != exp else float(exp)  # NaN: no expiry known
        left = None if exp is None else max(0.0, exp - now)
        if exp != self._expires_at:  # new credentials: the bar restarts full
            self._expires_at = exp
            self.countdown.max = max(left or 0.0, 1.0)
        self.countdown.value = min(left or 0.0, self.countdown.max)
        self.left.value = _html.duration(left)
        self.state_name = row.get("state") or "unknown"
        self.state.value = _html.badge(self.state_name)
        self.countdown.bar_style = {"valid": "success", "refreshing": "info", "expired": "warning"}.get(
            self.state_name, "danger"
        )
        self.refreshes.value = f"{int(row.get('refreshes') or 0)} refreshes"


class CredentialsPanel(_Panel):
    """Per-table credential countdowns and states, live.

    ``auto_refresh=True`` also refreshes due credentials of tables read from Python on each tick
    (``CredentialStore.refresh_all()``, which never raises), so expiry, refresh and revocation
    show up while nothing reads the table.
    """

    title = "lakesession credentials"

    def __init__(self, session: Session, interval: float | None = TICK_SECONDS, auto_refresh: bool = False):
        self.rows: dict[tuple[str, str], CredentialRow] = {}
        self.auto_refresh = auto_refresh
        self.list = widgets.VBox([])
        self.empty = widgets.HTML("<i>no table credentials yet: read a table first</i>")
        self.button = widgets.Button(description="Refresh now", icon="refresh")
        self._records: list[dict[str, Any]] = []
        super().__init__(session, interval)
        self.button.on_click(lambda _b: self._refresh_now())
        # listeners run inside the store's refresh (holding its per-table lock): never block there
        self._cleanups.append(
            session.credential_store.subscribe(
                lambda *_: threading.Thread(target=self._safe_update, daemon=True).start()
            )
        )
        self.children = (widgets.HTML("<b>Table credentials</b>"), self.empty, self.list, self.button, self.error)

    def _refresh_now(self) -> None:
        self.session.credential_store.refresh_all(force=True)
        self._safe_update()

    def _safe_update(self) -> None:
        try:
            self.update()
        except Exception as exc:
            self.show_error(exc)

    def tick(self) -> None:
        if self.auto_refresh:  # outside the panel lock: a refresh fires listeners
            self.session.credential_store.refresh_all()
        self.update()

    def _update(self) -> None:
        now = time.time()
        records = self.session.reports.credentials().to_dict("records")
        for r in records:
            key = (str(r["engine"]), str(r["table"]))
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = CredentialRow(*key)
            row.set(r, now)
        self._records = records
        boxes = tuple(self.rows[k].box for k in sorted(self.rows))
        if tuple(self.list.children) != boxes:
            self.list.children = boxes
        self.empty.layout.display = "none" if self.rows else None

    def model_rows(self) -> list[dict[str, Any]]:
        """What the widgets show (read back from their model state): table, state, seconds left."""
        out = []
        for (engine, table), row in sorted(self.rows.items()):
            out.append(
                {
                    "engine": engine,
                    "table": table,
                    "state": row.state_name,
                    "seconds_left": row.countdown.get_state()["value"],
                    "badge": row.state.get_state()["value"],
                }
            )
        return out

    def fallback_html(self) -> str:
        return _html.credentials_html(self._records)


def parse_since(value: str | float | None, now: float | None = None) -> float | None:
    """``10m``/``2h``/``30s``/``1d``, an ISO time, or epoch seconds → epoch seconds (``None``: no bound)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value)
    now = time.time() if now is None else now
    text = str(value).strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:].lower() in units and text[:-1].replace(".", "", 1).isdigit():
        return now - float(text[:-1]) * units[text[-1].lower()]
    try:
        return float(text)
    except ValueError:
        pass
    import pandas as pd

    try:
        ts = pd.Timestamp(text)
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: use e.g. 10m, 2h, 1d, an ISO time (2026-01-31T12:00) or epoch seconds"
        ) from None
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return ts.timestamp()


class AuditPanel(_Panel):
    """What the session accessed, with filters (action, decision, object, since) and a timeline."""

    title = "lakesession audit"
    ALL = "(all)"

    def __init__(self, session: Session, since: str | float | None = None, action: str | None = None):
        self.since = widgets.Text(
            value="" if since is None else str(since), description="since", placeholder="10m, 2h, ISO time"
        )
        self.action = widgets.Dropdown(options=[self.ALL], value=self.ALL, description="action")
        self.decision = widgets.Dropdown(options=[self.ALL, "allow", "deny"], value=self.ALL, description="decision")
        self.object = widgets.Text(value="", description="object", placeholder="contains…")
        self.timeline = widgets.HTML("")
        self.table = widgets.HTML("")
        self.reload = widgets.Button(description="Reload", icon="refresh")
        self._wanted_action = action
        self._frame: Any = None
        self.shown: list[dict[str, Any]] = []
        super().__init__(session)
        for w in (self.since, self.action, self.decision, self.object):
            w.observe(lambda _c: self._safe_render(), names="value")
        self.reload.on_click(lambda _b: self._safe_reload())
        filters = widgets.HBox([self.action, self.decision, self.object, self.since, self.reload])
        self.children = (widgets.HTML("<b>Audit</b>"), filters, self.timeline, self.table, self.error)

    def _safe_render(self) -> None:
        try:
            with self._lock:
                self._render()
                self.error.value = ""
        except Exception as exc:
            self.show_error(exc)

    def _safe_reload(self) -> None:
        try:
            self.update()
        except Exception as exc:
            self.show_error(exc)

    def _update(self) -> None:
        self._frame = self.session.reports.audit()
        actions = [self.ALL, *sorted(set(self._frame["action"]))]
        if self._wanted_action and self._wanted_action not in actions:
            actions.append(self._wanted_action)
        current = self._wanted_action or self.action.value
        self._wanted_action = None
        self.action.options = actions
        self.action.value = current if current in actions else self.ALL
        self._render()

    def _render(self) -> None:
        import pandas as pd

        df = self._frame
        since = parse_since(self.since.value)
        if since is not None:
            df = df[df["time"] >= pd.Timestamp(since, unit="s", tz="UTC")]
        if self.action.value != self.ALL:
            df = df[df["action"] == self.action.value]
        if self.decision.value != self.ALL:
            df = df[df["decision"] == self.decision.value]
        if self.object.value:
            df = df[df["object"].str.contains(self.object.value, regex=False)]
        self.shown = df.to_dict("records")
        points = [
            (r["time"].timestamp(), str(r["decision"]), f"{r['action']} {r['object']} ({r['decision']})")
            for r in self.shown
        ]
        self.timeline.value = _html.timeline_svg(points)
        self.table.value = _html.audit_html(self.shown)

    def fallback_html(self) -> str:
        return self.timeline.value + self.table.value


class ChainTree(_Panel):
    """The resolved view chain: object, security model, user in effect, decision per node."""

    title = "lakesession view chain"

    def __init__(self, session: Session, node: Any):
        self.node = node
        self.tree = widgets.HTML("")
        super().__init__(session)
        self.children = (self.tree, self.error)

    def _update(self) -> None:
        self.tree.value = self.node._repr_html_()

    def fallback_html(self) -> str:
        return self.tree.value
