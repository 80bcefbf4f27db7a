"""Every relative link of the READMEs and the docs resolves: a file that exists, and a heading for its anchor.

``mkdocs build --strict`` checks links between docs pages, but not the READMEs (GitHub and PyPI show them,
mkdocs never reads them) nor links to repository files outside ``docs/``. Links to this repository on GitHub
(``https://github.com/lakesession/lakesession/blob/main/…``, which the packages' READMEs need on PyPI) are
checked as the local file they name. Generated sections are filled first, as the site's build does.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from tests.support import load_script

ROOT = Path(__file__).resolve().parents[2]
REPO_URL = re.compile(r"^https://github\.com/lakesession/lakesession/(?:blob|tree)/main/")
LINK = re.compile(r"(?<!\!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\[[^\]]+\]:\s+(\S+)", re.M)
FENCE = re.compile(r"^([ \t]*)(```|~~~).*?^\1\2[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)


def _pages() -> list[Path]:
    readmes = [ROOT / "README.md", ROOT / "client" / "README.md", ROOT / "catalog" / "README.md"]
    return readmes + sorted((ROOT / "docs").rglob("*.md"))


@cache
def _gen() -> ModuleType:
    return load_script("docs_gen", ROOT / "docs" / "_gen.py")


def _rendered(page: Path) -> str:
    """The page's Markdown as the site builds it: generated sections filled."""
    text = page.read_text()
    if page.is_relative_to(ROOT / "docs") and "<!-- generated: " in text:
        text = _gen().on_page_markdown(text)
    return text


def slug(heading: str) -> str:
    """Python-Markdown's ``toc`` slug (the site's anchors); GitHub's differs only where hyphens repeat."""
    text = re.sub(r"<[^>]+>|`", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def _anchors(page: Path) -> set[str]:
    found = set()
    for line in FENCE.sub("", _rendered(page)).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            found |= {slug(m.group(1)), re.sub(r"[^\w -]", "", m.group(1).replace("`", "")).lower().replace(" ", "-")}
    found |= set(re.findall(r"""\bid=["']([^"']+)""", page.read_text()))
    return found


def broken(page: Path, text: str | None = None) -> list[str]:
    """The links of ``page`` (or of ``text``, as if it were there) that lead nowhere, each with why."""
    out = []
    shown = INLINE_CODE.sub("", FENCE.sub("", _rendered(page) if text is None else text))  # code is not a link
    for link in (a or b for a, b in LINK.findall(shown)):
        target = REPO_URL.sub(str(ROOT) + "/", link) if REPO_URL.match(link) else link
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith(str(ROOT)):
            continue  # another site, mailto:, …
        path_part, _, anchor = target.partition("#")
        if target.startswith(str(ROOT)):
            dest = Path(path_part)
        elif path_part:
            dest = (page.parent / path_part).resolve()
        else:
            dest = page
        if not dest.exists():
            out.append(f"{link}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            out.append(f"{link}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return out


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert not broken(page), f"{page.relative_to(ROOT)}: {broken(page)}"


def test_the_checker_finds_a_broken_link_and_anchor() -> None:
    """The checker itself: a missing file, a missing anchor, and links it must leave alone."""
    page = ROOT / "docs" / "how-to" / "probe.md"  # never written: the text is checked as if it were there
    text = (
        "# Probe `x`\n\n[a](missing.md) [b](serve.md#no-such-heading) [c](serve.md) [d](../index.md)\n"
        "[e](https://example.com/x.md) `[f](nowhere.md)`\n\n```\n[g](nowhere.md)\n```\n"
        "[h](https://github.com/lakesession/lakesession/blob/main/docs/how-to/nope.md)\n"
        "[i](startup.md#the-jar-download-one-progress-line)\n"
    )
    assert broken(page, text) == [
        "missing.md: no file docs/how-to/missing.md",
        "serve.md#no-such-heading: no heading #no-such-heading in docs/how-to/serve.md",
        "https://github.com/lakesession/lakesession/blob/main/docs/how-to/nope.md: no file docs/how-to/nope.md",
    ]
    assert slug("3. Trusted engines and `DEFINER` views") == "3-trusted-engines-and-definer-views"
    assert sum(len(_links(p)) for p in _pages()) > 100  # it does read the pages' links


def _links(page: Path) -> list[str]:
    return [a or b for a, b in LINK.findall(INLINE_CODE.sub("", FENCE.sub("", _rendered(page))))]
