"""The JupyterLab extension: kernel publisher, server endpoint, status bar item and side panel.

Fast tests exercise the publisher and the status files directly. The browser tests share one real
JupyterLab on loopback and one Debian Chromium (``tests/_browser.py``):

- a notebook loads a table on the embedded default; the status bar and the panel show the
  principal and per-table credential TTLs counting down, and neither the endpoint's responses,
  the status file nor the page contain any secret the kernel holds;
- notebooks/quickstart.ipynb runs top to bottom (Run All) and its status widget shows who the
  session acts as. Contract with that notebook: an element with CSS class ``lakesession-status``
  whose text includes the principal (``demo``) and "token expires in".
  ``LAKESESSION_QUICKSTART_NOTEBOOK`` points the test at another notebook.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from lakesession.lab import _jupyter_labextension_paths, _jupyter_server_extension_points
from lakesession.lab._publisher import Publisher, kernel_context, start_publisher
from lakesession.lab._status import is_secret_key, read_entries, scrub, status_file

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = Path(os.environ.get("LAKESESSION_QUICKSTART_NOTEBOOK", ROOT / "notebooks" / "quickstart.ipynb"))
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJkZW1vIn0.c2lnbmF0dXJl"


class FakeSession:
    def __init__(self, principal: str) -> None:
        self.principal = principal
        self.expires_at = time.time() + 600
        self.catalog_name = "lake"

    def status(self) -> dict[str, Any]:
        return {
            "state": "ready",
            "catalog_name": "lake",
            "uri": "http://127.0.0.1:1",
            "identity": {
                "principal": self.principal,
                "issuer": "http://127.0.0.1:1/oidc",
                "expires_at": self.expires_at,
                "kind": "client_credentials",
                "access_token": JWT,
                "client_secret": "hunter2",
            },
            "credentials": [
                {
                    "engine": "python",
                    "table": "ns.t",
                    "state": "valid",
                    "expires_at": self.expires_at,
                    "seconds_left": 600.0,
                    "s3.secret-access-key": "SECRETKEY",
                    "note": f"Bearer {JWT}",
                }
            ],
            "time": time.time(),
        }


class BrokenSession:
    catalog_name = "broken"

    def status(self) -> dict[str, Any]:
        raise RuntimeError("connection to https://user:hunter2@example.com refused")


def test_extension_points() -> None:
    assert _jupyter_server_extension_points() == [{"module": "lakesession.lab"}]
    assert _jupyter_labextension_paths()[0]["dest"] == "lakesession"
    config = json.loads((Path(__file__).parents[2] / "jupyter-config/server-config/lakesession.json").read_text())
    assert config["ServerApp"]["jpserver_extensions"] == {"lakesession.lab": True}


def test_publisher_is_a_no_op_outside_a_kernel() -> None:
    assert kernel_context() is None
    assert start_publisher(FakeSession("demo")) is None


def test_scrub_drops_secret_keys_and_token_values() -> None:
    doc = scrub(FakeSession("demo").status())
    text = json.dumps(doc)
    for secret in (JWT, "hunter2", "SECRETKEY"):
        assert secret not in text
    assert doc["identity"]["principal"] == "demo" and doc["credentials"][0]["table"] == "ns.t"
    assert is_secret_key("s3.session-token") and is_secret_key("refresh_token") and not is_secret_key("credentials")
    assert not is_secret_key("expires_at") and not is_secret_key("seconds_left")


def test_publisher_writes_private_scrubbed_status_and_follows_changes(tmp_path: Path) -> None:
    s1, s2 = FakeSession("demo"), FakeSession("alice")
    pub = Publisher("k-1", tmp_path / "lakesession", every=3600)  # the thread wakes only when a session is added
    broken = BrokenSession()
    try:
        pub.add(s1)
        pub.add(s2)
        path = status_file(tmp_path, "k-1")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not path.exists() or len(json.loads(path.read_text())["sessions"]) < 2):
            time.sleep(0.05)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        doc = json.loads(path.read_text())
        assert [s["identity"]["principal"] for s in doc["sessions"]] == ["demo", "alice"]
        assert "hunter2" not in path.read_text() and JWT not in path.read_text()
        writes = pub.writes
        assert not pub.publish()  # nothing changed (time and seconds_left are volatile): no rewrite
        s1.expires_at += 300  # the token was refreshed
        assert pub.publish() and pub.writes == writes + 1
        assert json.loads(path.read_text())["sessions"][0]["identity"]["expires_at"] == s1.expires_at
        pub.add(broken)
        pub.publish()
        shown = json.loads(path.read_text())["sessions"][2]
        assert shown["state"] == "error" and shown["error"] == "RuntimeError" and "hunter2" not in path.read_text()
    finally:
        pub.stop()
    assert not path.exists()  # the kernel's file goes with it


def test_read_entries_only_returns_running_kernels(tmp_path: Path) -> None:
    from lakesession.lab._status import write_atomic

    write_atomic(status_file(tmp_path, "a"), {"sessions": [{"identity": {"principal": "demo"}}]})
    write_atomic(status_file(tmp_path, "b"), {"sessions": []})
    status_file(tmp_path, "c").write_text("{not json")
    (tmp_path / "lakesession" / "kernel-d.json").write_text(json.dumps({"sessions": [], "token": JWT}))
    entries = read_entries(tmp_path, ["a", "c", "d"])
    assert [e["kernel_id"] for e in entries] == ["a", "d"]
    assert JWT not in json.dumps(entries)
    assert read_entries(tmp_path / "nowhere", ["a"]) == []


# -- the browser acceptance ------------------------------------------------------------------

LOAD_TABLE = """\
import lakesession, pyarrow as pa
s = lakesession.connect()
s.catalog.create_namespace("lab")
s.catalog.create_table("lab.t", schema=pa.schema([("id", pa.int64()), ("name", pa.string())]))
s.table("lab.t", mode="write").append(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
print(f"LAKESESSION-OK rows={s.table('lab.t').scan().to_arrow().num_rows}")
"""

# what the kernel holds that must never reach the browser: written to a file only the test reads
SECRETS_CELL = """\
import json, os
from lakesession.credentials import is_secret_key
_values = [s._token(), s.embedded.demo_secret]
for _c in s.credential_store.entry("lab.t").credentials:
    _values += [v for k, v in _c.config.items() if is_secret_key(k) and isinstance(v, str)]
_fd = os.open({path!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(_fd, json.dumps(_values).encode()); os.close(_fd)
print("SECRETS-WRITTEN", len(_values))
"""


def _seconds(page: Any, selector: str) -> int:
    value = page.locator(selector).first.get_attribute("data-seconds-left")
    assert value, f"no countdown in {selector}"
    return int(value)


def _walk_keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for k in value] + [k2 for v in value.values() for k2 in _walk_keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in _walk_keys(v)]
    return []


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Path]]:
    """One JupyterLab and one Chromium page for the browser tests of this module: (lab, page, dir)."""
    from tests._browser import chromium_page, jupyter_lab

    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "notebooks"
    root.mkdir()
    with jupyter_lab(tmp, root) as lab, chromium_page(tmp) as page:
        yield lab, page, tmp


@pytest.mark.slow
def test_status_bar_and_panel_show_identity_and_live_ttls(browser: tuple[Any, Any, Path]) -> None:
    from tests._browser import open_notebook, run_all, screenshot_element

    lab, page, tmp = browser
    secrets_path = tmp / "kernel-secrets.json"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(LOAD_TABLE),
        nbformat.v4.new_code_cell(SECRETS_CELL.format(path=str(secrets_path))),
    ]
    nbformat.write(nb, lab.root_dir / "lab.ipynb")

    assert lab.get("lakesession/status", auth=False).status_code in (401, 403)
    assert isinstance(lab.get("lakesession/status").json()["kernels"], list)
    open_notebook(page, lab, "lab.ipynb")
    state = run_all(page, timeout=180)
    assert not state["errors"], state
    page.wait_for_selector("text=LAKESESSION-OK rows=3")
    page.wait_for_selector("text=SECRETS-WRITTEN")
    secrets = json.loads(secrets_path.read_text())
    assert len(secrets) >= 4 and all(len(v) >= 8 for v in secrets)  # token, demo secret, key id, key, session token

    # the status bar: principal, a token countdown and the table count; the panel: the table's credentials
    item = ".lakesession-statusbar-item"
    page.wait_for_selector(f"{item} .lakesession-principal:has-text('demo')", timeout=30_000)
    page.wait_for_function(f"() => /1 table/.test(document.querySelector('{item}').textContent)")
    page.click(item)  # opens the side panel
    panel = "#lakesession-panel"
    row = f"{panel} .lakesession-credential[data-table='lab.t']"
    page.wait_for_selector(f"{row}[data-state='valid']", state="visible", timeout=30_000)
    text = page.locator(panel).inner_text()
    assert "demo" in text and "token expires in" in text and "lab.ipynb" in text, text
    assert "python" in page.locator(row).inner_text()

    # both count down live, between polls
    token_ttl, cred_ttl = f"{item} [data-role=token-ttl]", f"{row} [data-role=credential-ttl]"
    first = (_seconds(page, token_ttl), _seconds(page, cred_ttl), page.locator(cred_ttl).inner_text())
    time.sleep(2.2)
    second = (_seconds(page, token_ttl), _seconds(page, cred_ttl), page.locator(cred_ttl).inner_text())
    assert 0 < second[0] < first[0] <= 3600 and 0 < second[1] < first[1] <= 3600, (first, second)
    assert first[2] != second[2] and re.match(r"^(\d+h )?\d+m \d+s$", second[2]), (first, second)
    status_png, panel_png = tmp / "lab-statusbar.png", tmp / "lab-panel.png"
    screenshot_element(page, item, status_png)
    page.screenshot(path=str(panel_png))
    print(f"\nscreenshots: {status_png} {panel_png}")

    # the endpoint: what the kernel published, for running kernels only, and no secret
    response = lab.get("lakesession/status")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    body = response.json()
    (kernel,) = body["kernels"]
    assert kernel["path"] == "lab.ipynb" and "pid" not in kernel
    (session,) = kernel["sessions"]
    assert session["identity"]["principal"] == "demo" and session["identity"]["expires_at"] > time.time()
    (cred,) = [c for c in session["credentials"] if c["table"] == "lab.t"]
    assert cred["state"] == "valid" and cred["engine"] == "python" and cred["expires_at"] > time.time()
    assert not [k for k in _walk_keys(body) if is_secret_key(k)]
    (status_path,) = (lab.runtime_dir / "lakesession").glob(f"kernel-{kernel['kernel_id']}.json")
    assert stat.S_IMODE(status_path.stat().st_mode) == 0o600
    html = page.content()
    for secret in secrets:
        assert secret not in response.text, "a secret reached the status endpoint"
        assert secret not in html, "a secret reached the page"
        assert secret not in status_path.read_text(), "a secret reached the status file"

    # the kernel goes away: so does its entry (and the panel empties)
    lab.shutdown_kernels()
    deadline = time.monotonic() + 20
    while lab.get("lakesession/status").json()["kernels"] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert lab.get("lakesession/status").json()["kernels"] == []
    page.wait_for_selector(f"{panel} .lakesession-empty", timeout=15_000)


@pytest.mark.slow
def test_quickstart_runs_in_jupyterlab_and_shows_the_status_widget(browser: tuple[Any, Any, Path]) -> None:
    from tests._browser import open_notebook, run_all, screenshot_element

    lab, page, tmp = browser
    assert QUICKSTART.is_file(), f"{QUICKSTART} is missing"
    shutil.copytree(QUICKSTART.parent, lab.root_dir / "quickstart")  # a copy: autosave must not touch the repo
    t0 = time.monotonic()
    open_notebook(page, lab, f"quickstart/{QUICKSTART.name}")
    state = run_all(page, timeout=300)
    shot = tmp / "quickstart.png"
    page.screenshot(path=str(shot))
    print(f"\nquickstart ran in {time.monotonic() - t0:.0f}s; screenshot: {shot}")
    assert not state["errors"], f"cells failed: {state['errors']}"
    assert state["pending"] == 0, state

    status = page.locator(".lakesession-status").first
    status.wait_for(state="visible", timeout=30_000)
    text = status.inner_text()
    assert "demo" in text and "token expires in" in text, text
    widget_shot = screenshot_element(page, ".lakesession-status", tmp / "quickstart-status.png")
    print(f"status widget: {widget_shot}")
    # the lab extension sees the same kernel's session
    page.wait_for_selector(".lakesession-statusbar-item .lakesession-principal:has-text('demo')", timeout=30_000)
    lab.shutdown_kernels()
