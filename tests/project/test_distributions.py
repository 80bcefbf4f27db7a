"""Distributions from one package: the full ``lakesession`` and four slim ones generated from one table
(``tools/distributions.py``): ``lakesession-core`` (what the catalog and the client both import),
``lakesession-client``, ``lakesession-catalog`` and ``lakesession-engine`` (on the client), owning disjoint files.

The one-way import rules that make the split possible are checked on the source (AST), so a new import
across the line fails here before any install does; ``test_slim_install.py`` installs the slim wheel
for real (slow).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

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


def _table() -> ModuleType:
    """``tools/distributions.py``, the one table the slim pyprojects are generated from (loaded by path: tools/ is
    no package, and a ``tools`` package of some installed project must not stand in for it)."""
    name = "lakesession_tools_distributions"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "distributions.py")
        assert spec and spec.loader
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


def _owners(relative: str) -> list[str]:
    """The slim distributions whose wheel ships the package file ``relative`` (hatch's only-include / exclude)."""
    table = _table()

    def under(path: str, roots: tuple[str, ...]) -> bool:
        return any(path == r or path.startswith(r + "/") for r in roots)

    return [d.name for d in table.DISTRIBUTIONS if under(relative, d.owns) and not under(relative, table.excluded(d))]


def _package_files() -> list[str]:
    """Every file of the package as the wheels see it (``lakesession/...``), without caches and built artefacts."""
    artefacts = _table().ARTEFACTS
    files = [p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return sorted(f for f in files if not any(f == a or f.startswith(a + "/") for a in artefacts))


def test_the_committed_pyprojects_are_what_the_table_writes() -> None:
    assert _table().stale() == [], "run: python tools/distributions.py"
    for dist in _table().DISTRIBUTIONS:
        assert (ROOT / dist.folder / "lakesession").resolve() == PACKAGE.resolve(), (
            f"{dist.folder}/lakesession links it"
        )
        assert (ROOT / dist.folder / "README.md").is_file(), dist.folder


def test_the_slim_distributions_split_the_package_with_no_overlap() -> None:
    owners = {f: _owners(f) for f in _package_files()}
    assert {f: o for f, o in owners.items() if len(o) != 1} == {}, "each file has exactly one slim owner"
    assert owners["lakesession/__init__.py"] == ["lakesession-core"]
    assert owners["lakesession/reference/servecmd.py"] == ["lakesession-catalog"]
    assert owners["lakesession/engine/_proxy.py"] == ["lakesession-engine"]
    assert owners["lakesession/_spark/jvm/lakesession-jvm.jar"] == ["lakesession-client"]
    assert owners["lakesession/engine/jvm/lakesession-engine.jar"] == ["lakesession-engine"]  # the sandbox's own


def test_the_core_ships_at_most_2000_lines_of_python() -> None:
    core = [f for f in _package_files() if _owners(f) == ["lakesession-core"]]
    lines = sum(len((ROOT / f).read_text().splitlines()) for f in core if f.endswith(".py"))
    assert 0 < lines <= 2000, lines  # 16.5k before #43: the client's modules rode along into every catalog image


def _closure(start: list[str], doors: frozenset[str] = frozenset()) -> set[str]:
    """The package's modules ``start`` loads: their imports (function-level too), followed, with parent packages;
    ``doors`` are reached but not followed (each says in one line what to install when its target is missing)."""
    modules = {_module_name(p): p for p in _sources(PACKAGE)}
    todo, seen = list(start), set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if module in doors:
            continue
        parent = module.rpartition(".")[0]
        found = [*_imports(modules[module]), *([parent] if parent else [])]
        for name in (n for n in found if n.startswith("lakesession")):
            while name and name not in modules:  # `from .x import Name` names Name too
                name = name.rpartition(".")[0]
            todo += [name] if name else []
    return seen


def _owned_modules(name: str) -> set[str]:
    return {_module_name(p) for p in _sources(PACKAGE) if _owners(p.relative_to(ROOT).as_posix()) == [name]}


#: core modules one half does not import, with why they are in the core all the same: the wire rules stay one
#: package (``_wire``: what both halves follow on the wire), and these two are small
CORE_BY_DESIGN = {
    "lakesession._wire.enginerules": "the engine's rulebook (52 lines and its JSON): the client and engine read it",
    "lakesession._wire.redact": "botocore's redaction (61 lines): only the catalog's S3 code imports it so far",
}


def test_the_core_holds_what_both_halves_import_and_each_distribution_runs_on_what_it_installs() -> None:
    core, client, catalog, engine = map(
        _owned_modules, ("lakesession-core", "lakesession-client", "lakesession-catalog", "lakesession-engine")
    )
    assert _closure(sorted(core)) <= core, "the core imports nothing of the others"
    catalog_needs = _closure(sorted(catalog))
    assert catalog_needs <= catalog | core, sorted(catalog_needs - catalog - core)
    # the client's doors to the server (SERVER_DOORS) and to the engine (cli) say so when those are not installed
    client_needs = _closure(sorted(client), frozenset(SERVER_DOORS))
    assert client_needs <= client | core, sorted(client_needs - client - core)
    engine_needs = _closure(sorted(engine))
    assert engine_needs <= engine | client | core, sorted(engine_needs - engine - client - core)
    both = catalog_needs & (client_needs | engine_needs)  # the client's half: the engine runs on the client
    assert core - both == set(CORE_BY_DESIGN), sorted(core - both)
    assert both - core == set(), "a module both halves import belongs in the core"


def test_the_core_depends_on_exactly_what_its_files_import() -> None:
    core = _table().CORE
    files = [ROOT / f for f in _package_files() if _owners(f) == [core.name] and f.endswith(".py")]
    top = {n.split(".")[0] for f in files for n in _imports(f) if not n.startswith("lakesession")}
    third_party = top - set(sys.stdlib_module_names) - {"__future__"}
    dists = importlib.metadata.packages_distributions()
    assert {canonicalize_name(dists[t][0]) for t in third_party} == set(
        _dependency_names(_project(ROOT / "core" / "pyproject.toml"))
    )


def test_the_full_pyproject_carries_the_union_of_the_slim_ones() -> None:
    """The root pyproject (the full distribution, hand-written) installs what every slim one does: their
    dependencies (the engine's as its ``[engine]`` extra), their extras by name, the same pins and extras."""
    table = _table()
    full = _project(ROOT / "pyproject.toml")
    assert full["version"] == table.VERSION
    full_deps = _dependency_names(full)
    full_extras = {
        k: {canonicalize_name(Requirement(r).name): Requirement(r) for r in v}
        for k, v in full["optional-dependencies"].items()
    }  # type: ignore[attr-defined]
    union: dict[str, dict[str, list[Requirement]]] = {}  # "" (the base) or extra -> name -> each slim requirement
    for dist in table.DISTRIBUTIONS:
        base = table.FULL_EXTRA_OF.get(dist.name, "")
        for extra, reqs in [(base, dist.dependencies), *dist.extras.items()]:
            for r in map(Requirement, reqs):
                union.setdefault(extra, {}).setdefault(canonicalize_name(r.name), []).append(r)
    assert set(full_deps) == set(union[""]) | set(table.FULL_ONLY), "the full's dependencies: the slim ones' union"
    for extra, by_name in union.items():
        have = full_deps if extra == "" else full_extras[extra]
        assert set(by_name) == set(have) - set(table.FULL_ONLY), extra
        for name, reqs in by_name.items():
            assert have[name].extras == set().union(*(r.extras for r in reqs)), (extra, name)
            pins = {str(r.specifier) for r in reqs} | {str(have[name].specifier)}
            assert len(pins) == 1 or name in table.FULL_PINS, (extra, name, pins)
    scripts = full["scripts"]  # type: ignore[index]
    for dist in table.DISTRIBUTIONS:
        assert dist.scripts.items() <= scripts.items(), dist.name  # type: ignore[attr-defined]
    for dist in (table.CLIENT, table.CATALOG):
        assert not {canonicalize_name(Requirement(r).name) for r in dist.dependencies} & (
            SERVER_STACK if dist is table.CLIENT else CLIENT_STACK
        ), dist.name


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


def test_without_the_client_its_names_say_so_in_one_line(tmp_path: Path) -> None:
    """The catalog's install, simulated (the package's files minus the client's and the engine's, hidden by an import
    hook; the slow test installs it for real): ``lakesession.connect``/``spark`` raise ``ClientMissingError``."""
    hidden = sorted(_owned_modules("lakesession-client") | _owned_modules("lakesession-engine"))
    script = textwrap.dedent(
        f"""
        import importlib.abc, sys
        HIDDEN = set({hidden!r})
        class Hide(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name in HIDDEN:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        sys.meta_path.insert(0, Hide())
        import lakesession
        for name in ("connect", "spark", "Session"):
            try:
                getattr(lakesession, name)
            except lakesession.errors.ClientMissingError as exc:
                print(name, exc)
        """
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())
    assert set(lines) == {"connect", "spark", "Session"}, out.stdout
    assert lines["spark"].startswith("lakesession.spark is lakesession's client, which this install")
    assert "pip install ./core ./client" in lines["spark"] and FULL_INSTALL in lines["spark"]


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
