"""The README's promises: short, and its two commands are what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", text, re.S)
    assert block, "the README's 'Two commands' block"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_ci_runs_the_readmes_test_commands() -> None:
    commands = _commands()
    assert commands[0] == "pip install -e '.[dev]' && lakesession demo"  # the main job
    tests = [c.split("&& ")[-1] for c in commands if "pytest" in c]
    assert tests == ["python -m pytest -q -m 'not slow' -n auto", "python -m pytest -q -m slow -n 2"]
    ci = (ROOT / ".ci" / "run").read_text()
    for command in tests:
        assert command in ci, f".ci/run does not run the README's {command!r}"
