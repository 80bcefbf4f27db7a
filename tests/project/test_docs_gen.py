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


def test_jar_tables_and_sizes_come_from_versions_py() -> None:
    """The jar pages' tables are generated from ``versions.py``/``comet.py`` at build time; the figures in their
    prose (``117 MB`` a start, ``83 MB`` of cloud bundles, ``218 MB`` with Comet) must be what those tables say."""
    from lakesession._spark import comet
    from lakesession._spark import versions as V

    mb = lambda coords: f"{sum(V.JAR_BYTES[c] for c in coords) / 1e6:.0f} MB"  # noqa: E731
    start = [(V.GROUP, a, v) for a, v in V.maven_artifacts("4.1", "2.13")]
    clouds = [(V.GROUP, a, v) for a, v in V.CLOUD_BUNDLES.values()]
    on_41 = (comet.MAVEN_COMET["4.1"]["2.13"], comet.HADOOP_FOR_SPARK["4.1"], comet.SDK_FOR_ICEBERG["1.12.0"])
    extra = [c for c in comet.SHA1 if c[0] != V.GROUP and c[1] != "hadoop-client-api" and c[2] in on_41]
    assert (mb(start), mb(clouds), mb(extra), mb(start + extra)) == ("117 MB", "83 MB", "100 MB", "218 MB")

    table = _gen().on_page_markdown("<!-- generated: spark-jars -->")
    for c in (*start, *clouds):
        assert f"{c[1]}-{c[2]}" in table
    assert (
        f"| 4.1.x | 2.13 | `iceberg-spark-runtime-4.1_2.13-1.12.0` (48 MB), `iceberg-aws-bundle-1.12.0` (69 MB) | {mb(start)} |"
        in table
    )
    comet_table = _gen().on_page_markdown("<!-- generated: comet-jars -->")
    assert f"{mb(extra)} beyond the Iceberg jars every start needs, {mb(start + extra)} in all" in comet_table
    assert "| `comet-spark-spark4.1_2.13-1.2.0.jar` | 99 MB |" in comet_table
    assert "azure" not in comet_table and "gcp" not in comet_table

    pages = {p: (ROOT / "docs" / p).read_text() for p in ("how-to/jars.md", "how-to/comet.md", "how-to/startup.md")}
    assert "<!-- generated: spark-jars -->" in pages["how-to/jars.md"]
    assert "<!-- generated: comet-jars -->" in pages["how-to/comet.md"]
    assert "<!-- generated: spark-versions -->" in (ROOT / "docs" / "reference" / "spark-versions.md").read_text()
    prose = "\n".join(pages.values())
    assert "~100 MB" not in prose and "~95 MB" not in prose and "~115 MB" not in prose
    for claim in re.findall(r"\b(\d+) MB\b", re.sub(r"```.*?```", "", prose, flags=re.S)):
        assert f"{claim} MB" in {mb(start), mb(clouds), mb(extra), mb(start + extra), "600 MB"}, claim


def test_a_jar_without_a_documented_purpose_fails_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakesession._spark import versions as V

    monkeypatch.setitem(V.CLOUD_BUNDLES, "other", ("iceberg-other-bundle", "1.0"))
    monkeypatch.setitem(V.JAR_BYTES, (V.GROUP, "iceberg-other-bundle", "1.0"), 1)
    with pytest.raises(ValueError, match="no JAR_PURPOSE entry for the Maven jar iceberg-other-bundle"):
        _gen().on_page_markdown("<!-- generated: spark-jars -->")
