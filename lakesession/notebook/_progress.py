"""Progress in the notebook: device login polling, jar assembly, Spark jobs of a ``%%lakesql`` cell.

Each reporter is a context manager that shows an ipywidgets progress bar (or prints plain
lines where widgets are unavailable) and stops its polling thread on exit, even on errors.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from . import _html

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..session import Session

log = logging.getLogger("lakesession.notebook")


def _widgets() -> Any:
    try:
        import ipywidgets
    except ImportError:  # pragma: no cover - the notebook extra is missing
        return None
    return ipywidgets


def _display(obj: Any) -> None:
    from IPython.display import display

    display(obj)


class _Shown:
    """A widget plus its HTML/text fallback (what saved notebooks and consoles show)."""

    def __init__(self, widget: Any, html_text: str, text: str):
        self.widget, self.html, self.text = widget, html_text, text

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle.update({"text/plain": self.text, "text/html": self.html})
        return bundle


class DeviceLoginProgress:
    """The ``on_prompt`` of a device login: shows the link and code, then counts down while polling.

    Shows only what the user must see (verification URI and user code); the device code
    itself never reaches the notebook.
    """

    last: DeviceLoginProgress | None = None  # the most recent prompt shown (e.g. to copy the code programmatically)

    def __init__(self, interval: float = 1.0):
        DeviceLoginProgress.last = self
        self.interval = interval
        self.bar: Any = None
        self.label: Any = None
        self.prompt: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, prompt: Any) -> None:
        self.prompt = prompt
        link = prompt.verification_uri_complete or prompt.verification_uri
        info = (
            f'<div class="lakesession-login">To sign in, open <a href="{_html.esc(link)}" target="_blank">'
            f"{_html.esc(link)}</a> and confirm the code <b><code>{_html.esc(prompt.user_code)}</code></b>.</div>"
        )
        w = _widgets()
        if w is None:
            print(prompt.message(), flush=True)
            return
        self.bar = w.IntProgress(
            value=prompt.expires_in, min=0, max=max(prompt.expires_in, 1), description="waiting", bar_style="info"
        )
        self.label = w.Label(f"code expires in {_html.duration(prompt.expires_in)}")
        _display(_Shown(w.VBox([w.HTML(info), w.HBox([self.bar, self.label])]), info, prompt.message()))
        started = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, args=(started, prompt.expires_in), daemon=True, name="lakesession-device-progress"
        )
        self._thread.start()

    def _run(self, started: float, expires_in: int) -> None:
        while not self._stop.wait(self.interval):
            left = max(0, int(expires_in - (time.monotonic() - started)))
            self.bar.value = left
            self.label.value = f"code expires in {_html.duration(left)}"

    def finish(self, ok: bool) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.bar_style = "success" if ok else "danger"
            self.bar.description = "signed in" if ok else "failed"
            self.label.value = "" if ok else "the login did not complete"


class JarProgress:
    """``resolve_jars(progress=...)``: each status line (download, assembly) into one label."""

    def __init__(self) -> None:
        w = _widgets()
        self.lines: list[str] = []
        self.label = w.HTML("") if w is not None else None
        self.shown = False

    def __call__(self, message: str) -> None:
        self.lines.append(message)
        if self.label is None:
            print(f"lakesession: {message}", flush=True)
            return
        if not self.shown:
            _display(self.label)
            self.shown = True
        self.label.value = f"<small>Spark jars: {_html.esc(message)}</small>"


def start_spark(session: Session) -> SparkSession:
    """``session.spark()``, showing jar resolution and JVM start when Spark is not running yet."""
    if getattr(session, "_spark", None) is not None:
        return session.spark()
    progress = JarProgress()
    if not getattr(session, "_remote", None):
        from .._spark.jars import resolve_jars
        from .._spark.versions import clouds_for

        clouds = clouds_for(
            getattr(session, "warehouse", None),
            getattr(session, "_spark_conf", None),
            getattr(session, "_clouds", None),
        )
        resolve_jars(getattr(session, "_jars", None), progress=progress, clouds=clouds)  # warms what spark() uses
    progress("starting the Spark JVM…")
    spark = session.spark()
    progress("Spark is running")
    return spark


class SparkJobProgress:
    """Polls ``SparkContext.statusTracker()`` for the jobs of one job group and shows task progress.

    ``with SparkJobProgress(spark) as p: spark.sql(...).toPandas()`` — the jobs started inside the
    block (in this thread) belong to a fresh job group, so concurrent cells do not mix.
    """

    def __init__(self, spark: Any, description: str = "lakesql", interval: float = 0.25):
        self.spark, self.interval, self.description = spark, interval, description
        self.group = f"lakesession-{uuid.uuid4().hex[:12]}"
        self.bar: Any = None
        self.done_tasks = self.total_tasks = 0
        self.jobs: set[int] = set()
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sc: Any = None

    def __enter__(self) -> SparkJobProgress:
        self._sc = getattr(self.spark, "sparkContext", None)
        if self._sc is None:  # Spark Connect: no status tracker in the client
            return self
        self._sc.setJobGroup(self.group, self.description[:80], interruptOnCancel=True)
        w = _widgets()
        if w is not None:
            self.bar = w.IntProgress(value=0, min=0, max=1, description="Spark", bar_style="info")
            self.bar.layout.display = "none"  # shown once a job starts: DDL runs no job
            _display(self.bar)
        self._thread = threading.Thread(target=self._run, daemon=True, name="lakesession-spark-progress")
        self._thread.start()
        return self

    def poll(self) -> None:
        tracker = self._sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            self.jobs.add(job_id)
            job = tracker.getJobInfo(job_id)
            job_done = job_total = 0
            for stage_id in job.stageIds if job is not None else []:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    job_total += stage.numTasks
                    job_done += stage.numCompletedTasks
            finished = job is not None and str(job.status) == "SUCCEEDED"
            total += job_total
            done += job_total if finished else job_done  # stages skipped (reused shuffle) never run their tasks
        self.done_tasks, self.total_tasks = max(self.done_tasks, done), max(self.total_tasks, total)
        if self.bar is not None and self.total_tasks:
            self.bar.layout.display = None
            self.bar.max = self.total_tasks
            self.bar.value = self.done_tasks
            self.bar.description = f"{len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''}"

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception as exc:  # keep polling; a dead JVM ends the cell anyway
                self.errors += 1
                log.debug("Spark progress poll failed: %s", type(exc).__name__)

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._sc is None:
            return
        try:
            self.poll()
        except Exception:
            self.errors += 1
        finally:
            self._sc.setLocalProperty("spark.jobGroup.id", None)
            self._sc.setLocalProperty("spark.job.description", None)
        if self.bar is not None and self.total_tasks:
            self.bar.value = self.bar.max if exc_type is None else self.bar.value
            self.bar.bar_style = "success" if exc_type is None else "danger"
