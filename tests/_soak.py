"""CI size or full size for the suite's soak-sized tests: one switch, ``LAKESESSION_SOAK=1``.

CI's 2 cores run each soak-sized test (a differential run, a fuzzer, hundreds of users, a minute of load) at a
size that still proves its claim; ``LAKESESSION_SOAK=1`` runs the same test at the size it was written for
(what CI ran before the sizes were cut), e.g. before a release or after touching what the test covers:

    LAKESESSION_SOAK=1 python -m pytest -q tests/security/test_view_differential.py

Not the ``soak`` marker (tests that wait across credential lifetimes or outages): that one selects tests,
this one sizes them. A module's own variable (``LAKESESSION_DIFF_EXAMPLES``, ``LAKESESSION_FUZZ_EXAMPLES``)
still wins over both sizes.
"""

from __future__ import annotations

import os

FULL = os.environ.get("LAKESESSION_SOAK", "").strip() not in ("", "0")


def sized(ci: int, full: int, override: str | None = None) -> int:
    """``full`` under ``LAKESESSION_SOAK=1``, else ``ci``; the environment variable ``override`` (if set) wins."""
    if override and os.environ.get(override, "").strip():
        return int(os.environ[override])
    return full if FULL else ci
