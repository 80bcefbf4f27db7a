"""Distributions from one package: the full ``lakesession``, the slim ``lakesession-client`` and
``lakesession-catalog``, and ``lakesession-core``, the files those two share.

The one-way import rules that make the split possible are checked on the source (AST), so a new import
across the line fails here before any install does; ``test_slim_install.py`` installs the slim wheel
for real (slow).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lakesession.errors import FULL_INSTALL

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lakesession"
#: the catalog server's stack: the slim client must not pull any of it (the issue's list)
SERVER_STACK = {"fastapi", "uvicorn", "moto", "flask", "alembic", "sqlalchemy"}
#: the client modules through which the catalog server is reached (embedded default, `lakesession serve`)
SERVER_DOORS = {"lakesession.embedded", "lakesession.cli"}


def _project(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text())["project"]  # type: ignore[no-any-return]


def _dependency_names(project: dict[str, object]) -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in project["dependencies"]]  # type: ignore[attr-defined]
    return {canonicalize_name(r.name): r for r in reqs}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING`` (what an ``if`` guarding annotation-only imports tests)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` that can run: all but the bodies of ``if TYPE_CHECKING:`` (their ``else`` runs).

    What an installed distribution imports, and what can make an import cycle (``test_structure.py``), is what
    runs: an annotation-only import (``session: Session``) pulls nothing in."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and is_type_checking(node.test):
            stack.extend([node.test, *node.orelse])
        else:
            stack.extend(ast.iter_child_nodes(node))


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports when it runs (function-level and relative imports resolved; not those under
    ``if TYPE_CHECKING:``), as dotted names."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[str] = []
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append(target)
            found += [f"{target}.{alias.name}" for alias in node.names]  # `from . import x` names modules too
    return found


def _sources(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*.py") if "__pycache__" not in p.parts)


#: what only the client needs: the catalog server's distribution must not pull it
CLIENT_STACK = {"pyspark", "pandas", "hypercorn", "s3fs", "ipython", "jupyterhub", "jupyterlab"}


def test_the_slim_pyprojects_are_subsets_of_the_full_one() -> None:
    full = _project(ROOT / "pyproject.toml")
    full_deps = _dependency_names(full)
    core = _project(ROOT / "core" / "pyproject.toml")
    core_deps = _dependency_names(core)
    assert core["name"] == "lakesession-core" and core["version"] == full["version"]
    for folder, name, excluded in (
        ("client", "lakesession-client", SERVER_STACK),
        ("catalog", "lakesession-catalog", CLIENT_STACK),
    ):
        slim = _project(ROOT / folder / "pyproject.toml")
        assert slim["name"] == name and slim["version"] == full["version"]
        deps = _dependency_names(slim)
        # each slim one installs the core at its own version (the core's files are its own minus what it owns)
        assert str(deps.pop("lakesession-core").specifier) == f"=={full['version']}", name
        assert set(core_deps) <= set(deps), f"{name} carries every dependency of the files it shares"
        assert not set(deps) - set(full_deps), f"the full distribution must carry every {name} dependency"
        assert not excluded & set(deps), name
        for dep, req in deps.items():  # extras (pyiceberg[pyarrow]) and pins are the full set's
            assert req.extras <= full_deps[dep].extras, dep
            assert str(req.specifier) == str(full_deps[dep].specifier) or dep == "s3fs", dep
    for folder in ("client", "catalog", "core"):
        assert (ROOT / folder / "lakesession").resolve() == PACKAGE.resolve(), f"{folder}/lakesession links the package"
    scripts = full["scripts"]  # type: ignore[index]
    assert (
        scripts["lakesession-catalog"]
        == _project(ROOT / "catalog" / "pyproject.toml")["scripts"]["lakesession-catalog"]
    )  # type: ignore[index]


def test_imports_under_type_checking_are_not_followed() -> None:
    tree = ast.parse(
        "import typing\nif typing.TYPE_CHECKING:\n    import fastapi\nelse:\n    import json\n"
        "def f():\n    from typing import TYPE_CHECKING\n    if TYPE_CHECKING:\n        import moto\n    import httpx\n"
    )
    names = sorted(a.name for n in runtime_nodes(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names)
    assert names == ["TYPE_CHECKING", "httpx", "json", "typing"]


def test_the_server_imports_only_itself_and_the_wire_rules() -> None:
    offenders = [
        (_module_name(path), name)
        for path in _sources(PACKAGE / "reference")
        for name in _imports(path)
        if name.startswith("lakesession")
        and not name.startswith(("lakesession.reference", "lakesession._wire"))
        and name != "lakesession"
    ]
    assert offenders == []


def test_the_wire_rules_import_neither_half() -> None:
    offenders = [
        (_module_name(path), name)
        for path in _sources(PACKAGE / "_wire")
        for name in _imports(path)
        if name.startswith("lakesession") and not name.startswith("lakesession._wire")
    ]
    assert offenders == []


def test_the_client_reaches_the_server_only_through_its_two_doors() -> None:
    crossing: list[tuple[str, str]] = []
    stack: list[tuple[str, str]] = []
    for path in _sources(PACKAGE):
        module = _module_name(path)
        if module.startswith("lakesession.reference"):
            continue
        for name in _imports(path):
            if name.startswith("lakesession.reference") and module not in SERVER_DOORS:
                crossing.append((module, name))
            if name.split(".")[0] in SERVER_STACK:
                stack.append((module, name))
    assert crossing == []
    assert stack == [], "the client imports the server's stack"


def test_without_the_server_the_embedded_default_and_serve_say_so_in_one_line(tmp_path: Path) -> None:
    """The slim install, simulated: an import hook hides the server's modules (the slow test installs it for real)."""
    script = textwrap.dedent(
        """
        import importlib.abc, io, sys, contextlib
        HIDDEN = ("lakesession.reference", "fastapi", "uvicorn", "sqlalchemy", "alembic", "moto")
        class Hide(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.startswith(HIDDEN):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, Hide())
        import lakesession
        from lakesession.cli import main
        try:
            lakesession.connect()
        except lakesession.errors.CatalogServerMissingError as exc:
            print("CONNECT", exc)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["serve", "--port", "0"])
        print("SERVE", code, err.getvalue().strip())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())
    assert "The embedded default catalog needs lakesession's catalog server" in lines["CONNECT"]
    # the way to the full distribution that works from where the user stands (no index has `lakesession`)
    assert FULL_INSTALL in lines["CONNECT"] and "LAKESESSION_URI" in lines["CONNECT"]
    assert "pip install lakesession" not in lines["CONNECT"]
    code, _, message = lines["SERVE"].partition(" ")
    assert code == "2" and message.startswith("lakesession serve: `lakesession serve` needs lakesession's catalog")
    assert FULL_INSTALL in message
    assert "Traceback" not in out.stdout + out.stderr


def test_the_containerfile_installs_the_catalog_and_runs_its_script() -> None:
    """No container runtime on the CI machines: the image's recipe is checked against the repository
    (what it copies exists, what it installs is the catalog distribution, what it runs is its script);
    ``test_slim_install.py`` runs that very install and script for real."""
    text = (ROOT / "Containerfile").read_text()
    copies = [line.split()[1] for line in text.splitlines() if line.startswith("COPY ")]
    assert copies and all((ROOT / c).exists() for c in copies)
    assert {"catalog", "core", "lakesession"} <= set(copies)
    assert 'pip install /src/core "/src/catalog[postgres]"' in text
    entry = next(line for line in text.splitlines() if line.startswith("ENTRYPOINT"))
    script = entry.split('"')[1]
    assert script in _project(ROOT / "catalog" / "pyproject.toml")["scripts"]  # type: ignore[operator]
    assert "USER catalog" in text  # not root


def _docker_runs(text: str) -> list[str]:
    """Each ``docker run`` command of a text (a Containerfile's comments or a page), its continuations joined."""
    lines = [line.lstrip("#").strip() for line in text.splitlines()]
    runs, current = [], None
    for line in lines:
        if current is None and line.startswith("docker run "):
            current = ""
        if current is not None:
            current += " " + line.rstrip("\\").strip()
            if not line.endswith("\\"):
                runs.append(current.strip())
                current = None
    return runs


def test_the_documented_docker_run_mounts_its_config_and_sets_base_url() -> None:
    """The image reads ``--config`` inside the container (unmounted: exit 2), and binds 0.0.0.0, so without
    ``base_url`` it advertises loopback to every client: each documented ``docker run`` mounts and sets both."""
    for source in (ROOT / "Containerfile", ROOT / "docs" / "how-to" / "install.md"):
        runs = _docker_runs(source.read_text())
        assert runs, source
        for run in runs:
            words = run.split()
            config = words[words.index("--config") + 1]
            mounts = [words[i + 1] for i, w in enumerate(words) if w == "-v"]
            assert any(m.split(":")[1] == config for m in mounts), (source, run)
            assert "LAKESESSION_SERVE__BASE_URL=https://" in run or "--base-url" in words, (source, run)
