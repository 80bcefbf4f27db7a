"""JupyterLab on loopback and Debian's Chromium driven by Playwright, for the browser tests.

- ``jupyter_lab(tmp, root_dir)``: a real ``jupyter lab`` (token auth, 127.0.0.1, isolated config,
  data, runtime and IPython dirs, no browser) with the lakesession server extension enabled by the
  same ``jupyter-config`` file the wheel installs, and the lakesession labextension built
  (``lakesession.lab._build``, cached) and put on its ``JUPYTER_PATH``.
- ``chromium_page(tmp)``: ``/usr/bin/chromium`` (apt-installed when missing and running as root;
  Playwright's own browser download is never used) with a fresh profile.
- ``open_notebook`` / ``run_all``: open a notebook, run all cells, wait until every code cell ran.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from tests.factories import free_port

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_CONFIG = ROOT / "jupyter-config" / "server-config" / "lakesession.json"


def ensure_chromium() -> str:
    """Debian's Chromium; installed with apt when missing and running as root (like the jar assembly)."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(f"{CHROMIUM} is missing: install Debian's chromium (sudo apt-get install -y chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if (
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium"], env=env, capture_output=True, check=False
        ).returncode
        != 0
    ):
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, check=True, capture_output=True)
    return CHROMIUM


def ensure_labextension() -> Path:
    from lakesession.lab._build import build

    return build()


@dataclass
class Lab:
    base_url: str
    token: str = field(repr=False)
    root_dir: Path
    runtime_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes]

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def get(self, path: str, auth: bool = True) -> httpx.Response:
        headers = {"Authorization": f"token {self.token}"} if auth else {}
        return httpx.get(self.url(path), headers=headers, timeout=30)

    def shutdown_kernels(self) -> None:
        """End every session and its kernel (what closing the notebooks with "shut down kernel" does)."""
        headers = {"Authorization": f"token {self.token}"}
        for session in self.get("api/sessions").json():
            httpx.delete(self.url(f"api/sessions/{session['id']}"), headers=headers, timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))


@contextmanager
def jupyter_lab(tmp: Path, root_dir: Path, env: dict[str, str] | None = None) -> Iterator[Lab]:
    labext = ensure_labextension()
    config, data, runtime = tmp / "jupyter-config", tmp / "jupyter-data", tmp / "jupyter-runtime"
    jpath = tmp / "jupyter-path"
    (jpath / "labextensions").mkdir(parents=True, exist_ok=True)
    (jpath / "labextensions" / "lakesession").symlink_to(labext, target_is_directory=True)
    (config / "jupyter_server_config.d").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SERVER_CONFIG, config / "jupyter_server_config.d" / "lakesession.json")  # what the wheel installs
    settings = config / "lab" / "user-settings" / "@jupyterlab"
    _write(settings / "apputils-extension" / "notification.jupyterlab-settings", {"fetchNews": "false"})
    for d in (data, runtime, tmp / "ipython", tmp / "lakesession-home"):
        d.mkdir(parents=True, exist_ok=True)
    token = os.urandom(16).hex()
    port = free_port()
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "JUPYTER", "LAKESESSION_URI"))}
    child_env.update(
        {
            "JUPYTER_CONFIG_DIR": str(config),
            "JUPYTER_DATA_DIR": str(data),
            "JUPYTER_RUNTIME_DIR": str(runtime),
            "JUPYTER_PATH": str(jpath),
            "JUPYTER_TOKEN": token,
            "IPYTHONDIR": str(tmp / "ipython"),
            "LAKESESSION_HOME": str(tmp / "lakesession-home"),
            "LAKESESSION_LAB_INTERVAL": "1",
            "PYICEBERG_DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE": "true",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root_dir}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    log_path = tmp / "jupyter-lab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=child_env, stdout=log, stderr=subprocess.STDOUT, cwd=root_dir)
    lab = Lab(f"http://127.0.0.1:{port}/", token, root_dir, runtime, log_path, proc)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited {proc.returncode}:\n{lab.log()}")
            try:
                if lab.get("api/status").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"jupyter lab did not start:\n{lab.log()}")
            time.sleep(0.3)
        yield lab
    finally:
        kernel_pids = _kernel_pids(runtime)
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: jupyter_server shuts its kernels down, then exits
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pid in kernel_pids:  # kernels the server failed to shut down (their publishers wrote their pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _kernel_pids(runtime: Path) -> list[int]:
    pids = []
    for p in (runtime / "lakesession").glob("kernel-*.json"):
        try:
            pid = json.loads(p.read_text()).get("pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int) and pid != os.getpid():
            pids.append(pid)
    return pids


@contextmanager
def chromium_page(tmp: Path) -> Iterator[Any]:
    """A Playwright page in Debian's Chromium (fresh profile under ``tmp``)."""
    from playwright.sync_api import sync_playwright

    executable = ensure_chromium()
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp / "chromium-profile"),
            executable_path=executable,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 900},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(60_000)
            page.on("dialog", lambda dialog: dialog.accept())  # e.g. "leave the page?" when navigating away
            yield page
        finally:
            context.close()


_NOTEBOOK_STATE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!w || !w.content || !w.sessionContext) return null;
  const session = w.sessionContext.session;
  const kernel = session && session.kernel;
  const cells = w.content.widgets.filter(c => c.model.type === 'code' && c.model.sharedModel.getSource().trim() !== '');
  const errors = [], expected = [];
  cells.forEach((c, n) => {
    const tags = c.model.getMetadata('tags') || [];
    const raises = tags.includes('raises-exception') || /NBVAL_RAISES_EXCEPTION/.test(c.model.sharedModel.getSource());
    const outs = c.model.outputs;
    for (let i = 0; i < outs.length; i++) {
      const o = outs.get(i).toJSON();
      if (o.output_type === 'error') (raises ? expected : errors).push(`cell ${n}: ${o.ename}: ${o.evalue}`);
    }
  });
  return {status: kernel ? kernel.status : 'none', pending: cells.filter(c => c.model.executionCount === null).length,
          cells: cells.length, errors, expected, run: window.__lakesessionRun || null};
}"""


def open_notebook(page: Any, lab: Lab, path: str, timeout: float = 90) -> None:
    """Open ``path`` (relative to the server root) and wait for its kernel to be idle."""
    page.goto(lab.url(f"lab/tree/{quote(path)}?reset&token={lab.token}"))  # reset: no tabs restored from before
    page.wait_for_selector(".jp-NotebookPanel", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while True:
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():  # "Select Kernel" for notebooks without kernelspec metadata: take the default
            dialog.first.click()
        state = page.evaluate(_NOTEBOOK_STATE)
        if state and state["status"] == "idle":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"kernel not idle after {timeout}s: {state}\n{lab.log()}")
        time.sleep(0.3)


def run_all(page: Any, timeout: float = 240) -> dict[str, Any]:
    """Run all cells of the current notebook and wait until each ran; returns the final state
    (``errors``: unexpected ones, which end the wait; ``expected``: from cells marked
    ``raises-exception`` / ``NBVAL_RAISES_EXCEPTION``). Raises on timeout."""
    page.evaluate("""() => {
      window.__lakesessionRun = 'running';
      window.jupyterapp.commands.execute('notebook:run-all-cells').then(
        () => { window.__lakesessionRun = 'done'; }, e => { window.__lakesessionRun = 'failed: ' + e; });
    }""")
    deadline = time.monotonic() + timeout
    while True:
        state = page.evaluate(_NOTEBOOK_STATE)
        if state and state["run"] != "running" and state["pending"] == 0 and state["status"] == "idle":
            return dict(state)
        if state and state["errors"]:
            return dict(state)
        if time.monotonic() > deadline:
            raise TimeoutError(f"notebook still running after {timeout}s: {state}")
        time.sleep(0.5)


def screenshot_element(page: Any, selector: str, path: Path) -> Path:
    """A screenshot of the first ``selector`` — by clip, since live countdowns re-render it every second
    (Playwright's element screenshots wait for a stability that never comes)."""
    box = page.evaluate(
        """s => {
      const el = document.querySelector(s);
      if (!el) return null;
      el.scrollIntoView({block: 'center'});
      const r = el.getBoundingClientRect();
      return r.width && r.height ? {x: Math.max(0, r.x - 4), y: Math.max(0, r.y - 4), width: r.width + 8,
                                    height: r.height + 8} : null;
    }""",
        selector,
    )
    page.screenshot(path=str(path), clip=box) if box else page.screenshot(path=str(path))
    return path
