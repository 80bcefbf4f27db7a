"""Every code block of README.md and docs/**/*.md runs in CI, or carries a marker saying what CI lacks.

Python pages run as one script each (a notebook page, with ``%`` magics, in one real Jupyter kernel),
against the embedded default in a throwaway HOME; YAML examples load through the project's own loaders;
JSON parses; bash runs. The markers and how the blocks are checked: tests/_docblocks.py.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from tests import _docblocks as d

BLOCKS, PROBLEMS = d.all_blocks()


def _page_param(page: str, blocks: list[d.Block]) -> object:
    """One test per page: its blocks in order in one process (one JVM at most); slow when Spark or a kernel starts."""
    slow = any(b.spark or b.kind == d.KERNEL for b in blocks)
    return pytest.param(page, blocks, id=page, marks=[pytest.mark.slow] if slow else [])


def _python_pages() -> list[object]:
    by_page: dict[str, list[d.Block]] = {}
    for b in BLOCKS:
        if b.kind in (d.SCRIPT, d.KERNEL):
            by_page.setdefault(b.page, []).append(b)
    return [_page_param(page, blocks) for page, blocks in by_page.items()]


def _of(kind: str) -> list[object]:
    return [pytest.param(b, id=b.where) for b in BLOCKS if b.kind == kind]


def test_every_block_runs_or_carries_a_known_marker() -> None:
    bare = [f"{b.where} ({b.lang or 'no language'})" for b in BLOCKS if b.kind == d.NONE]
    assert not PROBLEMS, "\n".join(PROBLEMS)
    assert not bare, (
        "blocks CI has no way to run: give each a marker on the line before its fence, one of "
        f"{', '.join(f'<!-- {m} -->' for m in d.MARKERS)}:\n" + "\n".join(bare)
    )


def test_marker_census() -> None:
    """What runs and what is marked, per kind and marker (printed with -s); every block counted once."""
    kinds = Counter(b.kind for b in BLOCKS)
    markers = Counter(b.marker for b in BLOCKS if b.marker)
    print("\nblocks:", dict(kinds), "\nmarkers:", dict(markers))
    assert sum(kinds.values()) == len(BLOCKS) and sum(markers.values()) == kinds[d.MARKED]
    assert set(markers) <= set(d.MARKERS)
    readme = [b for b in BLOCKS if b.page == "README.md"]
    assert [b.kind for b in readme if b.lang == "python"] == [d.SCRIPT, d.MARKED, d.KERNEL, d.SCRIPT]
    assert {d.SCRIPT, d.KERNEL, d.YAML, d.JSON} <= set(kinds)


def test_the_check_fails_on_unknown_or_misplaced_markers_and_bare_blocks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- needs: clouds -->\n```python\nprint(1)\n```\n\n<!-- shows: output -->\n\n```text\nx\n```\n"
        "```\nunlabelled\n```\n<!-- an ordinary comment -->\n```json\n{}\n```\n~~~python\n%lakesession status\n~~~\n"
    )
    blocks, problems = d.blocks_of(page)
    assert [b.kind for b in blocks] == [d.MARKED, d.NONE, d.NONE, d.JSON, d.KERNEL]
    assert len(problems) == 2
    assert "unknown marker 'needs: clouds'" in problems[0] and "page.md:1" in problems[0]
    assert "'shows: output' is not directly before a fence" in problems[1] and "page.md:6" in problems[1]


@pytest.mark.parametrize("block", _of(d.YAML))
def test_yaml_examples_load_through_the_projects_loaders(block: d.Block, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for var in [v for v in os.environ if v.startswith("LAKESESSION_")]:
        monkeypatch.delenv(var)
    kinds = [d.validate_yaml(doc, tmp_path, monkeypatch.setenv) for doc in d.documents(block)]
    assert kinds and "unknown" not in kinds


def test_a_wrong_yaml_example_fails(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from lakesession.errors import ConfigError as EngineConfigError
    from lakesession.reference.bootstrap import BootstrapError
    from lakesession.reference.serveconfig import ConfigError

    with pytest.raises(BootstrapError, match="TABLE_READ"):
        d.validate_yaml("grants:\n  - {role: r, privilege: TABLE_READ, on: catalog}\n", tmp_path, monkeypatch.setenv)
    with pytest.raises(ConfigError, match="credential_tll"):
        d.validate_yaml("warehouse: s3://lake/wh\ncredential_tll: 60\n", tmp_path, monkeypatch.setenv)
    with pytest.raises(EngineConfigError, match="tls_crt"):
        d.validate_yaml("catalog: https://c\ntls_crt: x\n", tmp_path, monkeypatch.setenv)
    with pytest.raises(AssertionError, match="not a file lakesession reads"):
        d.validate_yaml("colour: blue\n", tmp_path, monkeypatch.setenv)


@pytest.mark.parametrize("block", _of(d.JSON))
def test_json_examples_parse(block: d.Block) -> None:
    assert json.loads(block.text)


@pytest.mark.parametrize("block", _of(d.BASH))
def test_bash_blocks_run(block: d.Block, tmp_path: Path) -> None:
    d.run_bash(block, tmp_path)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("page", "blocks"), _python_pages())
def test_python_blocks_run_page_by_page(page: str, blocks: list[d.Block], tmp_path: Path) -> None:
    if any(b.kind == d.KERNEL for b in blocks):
        cells = d.run_kernel(blocks, tmp_path)
        assert len(cells) == len(blocks) and all(c.execution_count for c in cells)
    else:
        out = d.run_script(blocks, tmp_path)
        started = [ln[4:] for ln in out.splitlines() if ln.startswith("--- ")]
        assert started == [b.where for b in blocks], out
