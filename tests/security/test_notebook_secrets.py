"""No secret in any notebook output.

``COLLECT`` runs *inside* a notebook's kernel after its last cell (notebooks/conftest.py adds
that step to each nbval-run notebook, so notebooks execute once in CI): it gathers every
secret alive in the kernel — client secrets, access/refresh tokens, gateway session secrets,
vended S3 keys and session tokens (Python store and the gateway's cache), the embedded demo
secret, the reference catalog's admin secret — and ``scan`` looks for them in the outputs
nbval recorded. The tests here check both halves in-process, so the scan itself can fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

import pytest

COLLECT = r"""
def _lakesession_collect_secrets():
    import gc, json
    found = set()
    keys = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token")
    def add(v):
        if isinstance(v, str) and len(v) >= 8:
            found.add(v)
    def from_body(body):
        try:
            doc = json.loads(body)
        except Exception:
            return
        for cfg in [doc.get("config") or {}] + [c.get("config") or {} for c in doc.get("storage-credentials") or []]:
            for k in keys:
                add(cfg.get(k))
    for obj in gc.get_objects():
        mod = getattr(type(obj), "__module__", None)
        if not isinstance(mod, str) or not mod.startswith("lakesession"):
            continue
        name = getattr(type(obj), "__name__", "")
        if not isinstance(name, str):
            continue
        if name == "Token":
            add(obj.access_token); add(obj.refresh_token)
        elif hasattr(obj, "_client_secret"):
            add(obj._client_secret)
        if name == "StaticToken":
            for v in vars(obj).values() if hasattr(obj, "__dict__") else ():
                add(v)
        if name == "Gateway":
            add(obj.secret)
        if name == "EmbeddedCatalog":
            add(obj.demo_secret)
        if name == "ReferenceCatalog":
            add(obj.admin_credentials.client_secret)
        if name == "StorageCredential":
            for k in keys:
                add(obj.config.get(k))
        if name == "_Entry" and hasattr(obj, "reply"):
            from_body(obj.reply[1])
    return sorted(found)
"""


def collect_here() -> list[str]:
    """Run ``COLLECT`` in this process (what the kernel step does in a notebook's kernel)."""
    ns: dict[str, Any] = {}
    exec(COLLECT, ns)
    return ns["_lakesession_collect_secrets"]()


def output_texts(outputs: Iterable[dict[str, Any]]) -> str:
    """Everything a cell showed: streams, errors, every mime type of display data (incl. widget state)."""
    return json.dumps(list(outputs), default=str)


def scan(text: str, secrets: Iterable[str]) -> list[str]:
    """The secrets found in ``text``, each shown only by its length (a report must not leak it)."""
    return [f"<secret of {len(s)} chars>" for s in secrets if s and s in text]


def test_scan_finds_a_planted_secret_and_reports_it_redacted() -> None:
    outs = [
        {"output_type": "stream", "text": "ok"},
        {"output_type": "display_data", "data": {"text/html": "<b>key AKIAPLANTED123</b>"}},
    ]
    hits = scan(output_texts(outs), ["AKIAPLANTED123", "not-there-at-all"])
    assert hits == ["<secret of 14 chars>"] and "AKIAPLANTED123" not in repr(hits)


@pytest.mark.slow  # the shared Spark JVM
def test_collector_finds_the_live_secrets_and_views_show_none(lake) -> None:  # type: ignore[no-untyped-def]
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from lakesession.notebook import _views
    from lakesession.notebook._magics import LakesessionMagics

    lake.sql("CREATE NAMESPACE IF NOT EXISTS lake.nbsecrets")
    lake.sql("CREATE TABLE IF NOT EXISTS lake.nbsecrets.t (id BIGINT) USING iceberg")
    lake.sql("INSERT INTO lake.nbsecrets.t VALUES (1)")
    assert lake.table("nbsecrets.t").scan().to_arrow().num_rows >= 1  # vended keys in the Python store
    secrets = collect_here()
    assert lake.gateway.secret in secrets and lake.identity.token() in secrets
    assert lake.embedded.demo_secret in secrets
    vended = [c.config["s3.session-token"] for c in lake.credential_store.entry("nbsecrets.t").credentials]
    assert vended and set(vended) <= set(secrets), "vended session tokens not collected"
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "lakesession")
    _views.use(lake)
    shown = []
    for line in ("status", "grants", "credentials", "audit", "resolve nbsecrets.t"):
        with capture_output() as cap:
            res = sh.run_cell(f"%lakesession {line}")
        assert res.success, cap.stdout
        shown.append(cap.stdout + repr(LakesessionMagics.last_view) + LakesessionMagics.last_view._repr_html_())
    with capture_output() as cap:
        sh.run_cell("%%lakesql\nSELECT * FROM lake.nbsecrets.t")
    shown.append(cap.stdout + "".join(str(o.data) for o in cap.outputs))
    assert scan("\n".join(shown), secrets) == []


def test_collector_runs_in_a_fresh_kernel_process() -> None:
    """The collector's code must run standalone (it is sent to notebook kernels as text)."""
    code = COLLECT + "\nimport json, lakesession\nprint(json.dumps(_lakesession_collect_secrets()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout) == [], out.stderr[-1000:]
