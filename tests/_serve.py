"""`lakesession serve` as a subprocess (this worktree's code), its printed settings, and tokens from its issuer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


class Served:
    """A running ``lakesession serve``; ``lines`` holds what it printed (``catalog``, ``warehouse``, …)."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str] | None = None,
        timeout: float = 90,
        *,
        command: list[str] | None = None,
    ):
        """``command``: another way to run serve (an installed ``lakesession-catalog``, with ``env`` as given)."""
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})} if command is None else dict(env or {})
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "lakesession.cli", "serve"]), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
        )
        self.lines: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while "connect" not in self.lines and time.monotonic() < deadline:
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                break
            key, _, value = line.strip().partition(": ")
            self.lines[key] = value
        if "connect" not in self.lines:
            self.stop()
            raise AssertionError(f"serve did not start: {self.lines}\n{self.proc.stderr.read()}")  # type: ignore[union-attr]

    @property
    def uri(self) -> str:
        return self.lines["catalog"]

    @property
    def token_endpoint(self) -> str:
        return self.lines["token endpoint"]

    def token(self, client_id: str, secret: str) -> str:
        r = httpx.post(
            self.token_endpoint,
            data={"grant_type": "client_credentials", "scope": "catalog"},
            auth=(client_id, secret),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        return str(r.json()["access_token"])

    def admin_token(self) -> str:
        secret = Path(self.lines["admin credentials"].split(" ")[0]).read_text().strip()
        return self.token("admin", secret)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return int(self.proc.returncode)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def run_serve(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``serve`` expected to fail before binding (exit code 2)."""
    return subprocess.run(
        [sys.executable, "-m", "lakesession.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )
