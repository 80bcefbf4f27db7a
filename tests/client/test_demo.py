"""The README's main job, as a user runs it: `lakesession demo` in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_demo_runs_end_to_end(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["LAKESESSION_HOME"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "lakesession.cli", "demo"], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "principal demo" in text
    assert "read with pyiceberg: 4 orders" in text
    assert "Ada" in text and "Grace" in text and "Linus" in text
    assert "commit_table" in text and "table demo.orders" in text
    # the JVM's own notice for Spark 4's vector module (printed by the java launcher, not Spark's logging)
    stderr = "\n".join(
        x for x in out.stderr.splitlines() if x != "WARNING: Using incubator modules: jdk.incubator.vector"
    )
    assert "Traceback" not in stderr and "WARN" not in stderr, stderr[-3000:]
    for leak in ("Bearer ", "s3.secret-access-key", "s3.session-token", "eyJ"):  # eyJ: the start of any JWT
        assert leak not in text + out.stderr, leak
    assert not list(tmp_path.glob("embedded/session-*")), "the sandbox's state is removed when the process exits"
