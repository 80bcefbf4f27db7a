"""Every fenced block of README.md and docs/**/*.md, and how CI checks it (tests/project/test_docs_blocks.py).

A block is run or validated by its language: Python (a page's blocks in order in one process; in one
Jupyter kernel when any of them uses a magic), ``%%lakesql`` cells (in that kernel), bash (``bash -e``),
YAML (the project's own loader for what it is: bootstrap, client, serve or engine config), JSON (parsed).
A block CI cannot run carries a marker on the line directly before its fence, one of ``MARKERS``; text
and unlabelled blocks need one (usually ``<!-- shows: output -->``). A marker outside this vocabulary,
or one not directly before a fence, is an error: a typo must not silently excuse a block.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]

#: what a block may need that CI lacks (or: it is not input at all). Other docs writers use the same words.
MARKERS = (
    "needs: external-catalog",  # a real catalog (its URI, principals, tables) that CI does not have
    "needs: cloud",  # a cloud account (AWS STS, Azure, GCP)
    "needs: cluster",  # a Spark cluster (spark://…)
    "needs: container",  # docker/podman build or run
    "needs: jupyterhub",  # a JupyterHub deployment (its config file)
    "needs: idp",  # a running identity provider (Keycloak, Entra ID, Okta)
    "needs: install",  # a pip/apt install command line
    "shows: output",  # output or an illustration, not input
    "needs: setup",  # a fragment continuing an earlier block (its variables, files)
)
MARKER = re.compile(r"^\s*<!--\s*((?:needs|shows)\s*:.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
MAGIC = re.compile(r"^\s*%")

# the kinds of check a block gets
KERNEL, SCRIPT, BASH, YAML, JSON, MARKED, NONE = "kernel", "script", "bash", "yaml", "json", "marked", "none"


@dataclass(frozen=True)
class Block:
    page: str  # relative to ROOT
    line: int  # the opening fence's line (1-based)
    lang: str
    text: str
    marker: str | None  # the marker's text (``needs: cloud``), known or not

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str:
        """How CI checks this block (``none``: no way, so it needs a marker)."""
        if self.marker is not None:
            return MARKED
        lines = [ln for ln in self.text.splitlines() if ln.strip()]
        if self.lang in ("python", "py", "ipython"):
            if any(ln.lstrip().startswith(">>>") for ln in lines):
                return NONE  # a REPL transcript: output mixed in
            return KERNEL if any(MAGIC.match(ln) for ln in lines) else SCRIPT
        if self.lang == "sql":
            return KERNEL if lines and lines[0].startswith("%%") else NONE
        if self.lang in ("bash", "sh", "shell"):
            return BASH
        if self.lang in ("yaml", "yml"):
            return YAML
        if self.lang == "json":
            return JSON
        return NONE

    @property
    def spark(self) -> bool:
        """Whether running it starts a Spark JVM (the slow part)."""
        return bool(re.search(r"\.spark\(|%%lakesql|\.sql\(", self.text))


def pages() -> list[Path]:
    """README.md and every docs page (new pages are picked up by the glob)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> tuple[list[Block], list[str]]:
    """The page's fenced blocks, and its problems (unknown or misplaced markers, unclosed fences)."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    lines = path.read_text().splitlines()
    out: list[Block] = []
    problems: list[str] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        marker = MARKER.match(lines[i])
        if marker:
            if marker.group(1) not in MARKERS:
                problems.append(f"{rel}:{i + 1}: unknown marker {marker.group(1)!r}; known: {', '.join(MARKERS)}")
            if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
                problems.append(f"{rel}:{i + 1}: marker {marker.group(1)!r} is not directly before a fence")
        if not m:
            i += 1
            continue
        start, indent, fence = i, len(m.group("indent")), m.group("fence")
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and not lines[i].strip().strip(fence[0])):
            text = lines[i]
            body.append(text[indent:] if text[:indent].isspace() else text.lstrip() if indent else text)
            i += 1
        if i >= len(lines):
            problems.append(f"{rel}:{start + 1}: unclosed fence")
        before = MARKER.match(lines[start - 1]) if start > 0 else None
        lang = (m.group("info").split() or [""])[0].strip("{}.").lower()
        out.append(Block(rel, start + 1, lang, "\n".join(body) + "\n", before.group(1) if before else None))
        i += 1
    return out, problems


def all_blocks() -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for path in pages():
        found, wrong = blocks_of(path)
        blocks += found
        problems += wrong
    return blocks, problems


# --- running -------------------------------------------------------------------------------------


def fixture_files() -> dict[str, str]:
    """Files the docs' blocks name as if the reader had them: ``policy.yaml`` is the one the serve how-to shows
    (its first YAML block), which must also be the bootstrap reference's example (one policy in the docs)."""
    shown = next(b for b in blocks_of(ROOT / "docs/how-to/serve.md")[0] if b.kind == YAML)
    reference = next(b for b in blocks_of(ROOT / "docs/reference/bootstrap.md")[0] if b.kind == YAML)
    if shown.text != reference.text:
        raise AssertionError(f"{shown.where} (policy.yaml) differs from {reference.where}: keep them the same")
    return {"policy.yaml": shown.text}


def environment(home: Path) -> dict[str, str]:
    """The embedded default, and nothing of this machine's: HOME, state and config in ``home``.

    Only the jar/class cache stays shared (``LAKESESSION_CACHE_DIR``): Spark's jars are not the reader's state.
    """
    from lakesession._spark.jars import cache_dir

    drop = ("LAKESESSION_", "PYICEBERG_", "AWS_", "AZURE_", "GOOGLE_", "XDG_", "JUPYTER_", "IPYTHON")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        LAKESESSION_CACHE_DIR=str(cache_dir()),
        LAKESESSION_HOME=str(home / "lakesession"),
        LAKESESSION_CONFIG=str(home / "no-config.yaml"),
        PYICEBERG_HOME=str(home),
        LAKESESSION_WIDGETS="0",
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PATH=os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]),
    )
    return env


def prepare(workdir: Path) -> dict[str, str]:
    """A working directory holding the fixture files; the environment to run blocks in."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in fixture_files().items():
        (workdir / name).write_text(text)
    return environment(workdir / "home")


_SCRIPT = """\
import json, sys
ns = {"__name__": "__main__"}
for b in json.load(open(sys.argv[1])):
    print(f"--- {b['where']}", flush=True)
    exec(compile("\\n" * b["line"] + b["text"], b["path"], "exec"), ns)
"""


def run_script(blocks: list[Block], workdir: Path, timeout: float = 600) -> str:
    """A page's Python blocks, in order, as one script (one namespace, one process); tracebacks name page lines."""
    env = prepare(workdir)
    spec = workdir / "blocks.json"
    spec.write_text(
        json.dumps([{"where": b.where, "line": b.line, "path": str(ROOT / b.page), "text": b.text} for b in blocks])
    )
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(spec)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode:
        raise AssertionError(
            f"a block failed (the last '---' line names it):\n{done.stdout[-3000:]}{done.stderr[-4000:]}"
        )
    return done.stdout


def run_kernel(blocks: list[Block], workdir: Path, timeout: float = 600) -> list[Any]:
    """A page's Python/``%%lakesql`` blocks as the cells of one notebook, in a real Jupyter kernel."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    env = prepare(workdir)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(b.text.rstrip("\n"), metadata={"where": b.where}) for b in blocks]
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
    try:
        client.execute(env=env)
    except CellExecutionError as exc:
        failed = next(
            (
                c.metadata["where"]
                for c in nb.cells
                if any(o.get("output_type") == "error" for o in c.get("outputs", []))
            ),
            "?",
        )
        raise AssertionError(f"block {failed} failed in the kernel:\n{str(exc)[-4000:]}") from None
    return list(nb.cells)


def run_bash(block: Block, workdir: Path, timeout: float = 120) -> str:
    env = prepare(workdir)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"{block.where} (bash) exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    )
    return done.stdout


# --- validating --------------------------------------------------------------------------------------

BOOTSTRAP_KEYS = {"principals", "roles", "locations", "grants"}


def documents(block: Block) -> list[str]:
    """The YAML documents of a block (``---`` separates several examples)."""
    return [d for d in re.split(r"(?m)^---\s*$", block.text) if d.strip()]


def yaml_kind(text: str) -> str:
    """Which file of the project's a YAML example is: bootstrap, client (config.yaml), engine or serve config."""
    from lakesession.engine._config import EngineConfig
    from lakesession.reference.serveconfig import KEYS

    data = yaml.safe_load(text)
    keys = set(data) if isinstance(data, dict) else set()
    engine_keys = {f.name for f in EngineConfig.__dataclass_fields__.values()}
    if keys and keys <= BOOTSTRAP_KEYS:
        return "bootstrap"
    if keys & {"catalogs", "default"}:
        return "client"
    if "catalog" in keys or (keys and keys <= engine_keys - set(KEYS)):
        return "engine"  # the engine's file names its catalog; the server's has no such key
    if keys & set(KEYS):
        return "serve"  # its loader then names any unknown key
    return "unknown"


def validate_yaml(text: str, workdir: Path, setenv: Any) -> str:
    """Load the example with the loader that reads such files; returns its kind.

    Run with no ``LAKESESSION_*`` variables set; ``setenv`` (pytest's ``monkeypatch.setenv``) points
    ``LAKESESSION_CONFIG`` at a client config example."""
    kind = yaml_kind(text)
    path = workdir / f"{kind}.yaml"
    path.write_text(text)
    if kind == "bootstrap":
        from lakesession.reference import bootstrap

        bootstrap.parse(text, str(path))
    elif kind == "client":
        from lakesession._settings import Settings

        setenv("LAKESESSION_CONFIG", str(path))
        names = yaml.safe_load(text).get("catalogs") or {}
        for name in names:
            Settings.resolve(name, {})
        assert names, f"a client config example without catalogs:\n{text}"
    elif kind == "engine":
        from lakesession.engine._config import EngineConfig

        EngineConfig.resolve({}, str(path))
    elif kind == "serve":
        from lakesession.reference.serveconfig import resolve

        resolve(path, environ={})
    else:
        raise AssertionError(f"not a file lakesession reads (bootstrap, config.yaml, serve or engine config):\n{text}")
    return kind
