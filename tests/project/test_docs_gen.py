"""The generated reference sections (docs/_gen.py, the site's build hook): complete, and readable."""

from __future__ import annotations

import re

import pytest
import yaml

from lakesession import errors
from tests.project.test_docs_links import ROOT, _gen


def test_troubleshooting_has_every_error_of_the_tree_with_causes_and_fix() -> None:
    page = _gen().on_page_markdown("<!-- generated: troubleshooting -->")
    headings = re.findall(r"^### `(\w+)`$", page, re.M)
    assert sorted(headings) == sorted(errors.__all__)
    assert [name for _, name in _gen().error_tree()] == headings  # in the tree's order
    for block in page.split("### ")[1:]:
        assert "**Causes**\n\n- " in block and "**Fix**: " in block, block
    assert "Under `LakesessionError` → `ConfigError`." in page.split("### `UnknownOptionError`")[1]


def test_troubleshooting_refuses_an_error_without_an_entry() -> None:
    """A new error class must come with its causes and fix: the build (``--strict``) fails without them."""
    entries = yaml.safe_load((ROOT / "docs" / "_troubleshooting.yaml").read_text())
    del entries["ScopeError"]
    with pytest.raises(ValueError, match=r"no entry for \['ScopeError'\]"):
        _gen().troubleshooting(entries)
    entries["ScopeError"] = entries["NotAnError"] = {"causes": ["x"], "fix": "y"}
    with pytest.raises(ValueError, match=r"entries naming no error \['NotAnError'\]"):
        _gen().troubleshooting(entries)


def test_names_in_reference_tables_cannot_break_mid_word() -> None:
    """The theme breaks any code span anywhere; names in table cells are kept whole by extra.css's class."""
    for section in ("settings", "environment", "serve-config"):
        table = _gen().on_page_markdown(f"<!-- generated: {section} -->")
        first_cells = [row.split("|")[1].strip() for row in table.splitlines()[2:] if not row.startswith("| **")]
        assert first_cells and all(c.startswith('<span class="ls-name">`') for c in first_cells), section
    assert "LAKESESSION_URI" in _gen().on_page_markdown("<!-- generated: environment -->")
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    assert re.search(r"\.ls-name code \{[^}]*white-space: nowrap", css)
    assert "stylesheets/extra.css" in (ROOT / "mkdocs.yml").read_text()
