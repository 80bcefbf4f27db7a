"""The house in order: no public name shadowed by a module, one error tree, no import cycle."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import lakesession
import lakesession.errors as errors_mod
from lakesession.errors import LakesessionError
from tests.project.test_distributions import runtime_nodes

PACKAGE = Path(lakesession.__file__).parent
# internal exceptions that never leave their module (caught where they are raised), with why
INTERNAL_EXCEPTIONS = {
    "lakesession._spark._classscan.ClassFormatError": "the jar scanner's, caught in _spark/_assemble.py",
    # the wire rules both halves share raise plain ValueErrors (they may import neither half's tree): the
    # client turns them into ViewChainError (catalog/_chains.py), the server into a 400 (reference/viewsecurity.py,
    # reference/viewsql.py)
    "lakesession._wire.referenced_by.MalformedReferencedBy": "caught in catalog/_chains.py and reference/viewsecurity.py",
    "lakesession._wire.viewsql.UnqualifiedReference": "caught in catalog/_chains.py and reference/viewsql.py",
    # token verification both halves share (a trusted engine verifies its users' tokens): the server turns
    # them into NotAuthorized / ServiceUnavailable (reference/idp/_keys.py, reference/idp/_remote.py)
    "lakesession._wire.jwks.TokenRejected": "caught in reference/idp/_keys.py and reference/idp/_remote.py",
    "lakesession._wire.jwks.IssuerUnavailable": "caught in reference/idp/_remote.py",
    # the trusted engine's own (a server): its front door turns them into gRPC statuses, which the client half
    # raises as EngineRefusedError / its Connect errors
    "lakesession.engine._auth.Unauthenticated": "caught in engine/_proxy.py (UNAUTHENTICATED)",
    "lakesession.engine._sandbox.Refused": "caught in engine/_proxy.py (PERMISSION_DENIED)",
    "lakesession.engine._rewrite.CatalogRefusal": "caught in engine/_proxy.py (PERMISSION_DENIED as the catalog's 403)",
    "lakesession.engine._limits.Exhausted": "caught in engine/_proxy.py (RESOURCE_EXHAUSTED: EngineRefusedError)",
    "lakesession.engine._limits.ExchangeRefused": "caught in engine/_proxy.py (UNAUTHENTICATED)",
    "lakesession.engine._limits.CatalogUnavailable": "caught in engine/_proxy.py (UNAVAILABLE: CatalogAccessError)",
    "lakesession.engine._limits.SessionEnded": "caught in engine/_proxy.py (FAILED_PRECONDITION: EngineUnavailableError)",
}


# scripts Alembic executes itself (env.py reads the running migration's context), not importable modules
ALEMBIC_SCRIPTS = ("lakesession.reference.migrations.env", "lakesession.reference.migrations.versions")


def submodules(*, client_only: bool) -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(lakesession.__path__, "lakesession.")]
    names = [n for n in names if not n.startswith(ALEMBIC_SCRIPTS)]
    return [n for n in names if not (client_only and n.startswith("lakesession.reference"))]


def import_all(names: list[str]) -> list[ModuleType]:
    """Import every module; one that cannot import fails the test with the reason (``[dev]`` installs all extras)."""
    modules, failures = [], []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ImportError as exc:
            failures.append(f"{name}: {exc!r} (install lakesession[dev] for every optional extra)")
    assert not failures, "modules that do not import:\n" + "\n".join(failures)
    return modules


def public_types() -> dict[str, type]:
    return {name: type(getattr(lakesession, name)) for name in lakesession.__all__}


# -- 1. no public name shadowed by a submodule ------------------------------------------------------
EXPECTED_KINDS = {
    "Session": type,
    "Settings": type,
    "__version__": str,
    "connect": type(lambda: None),
    "current_session": type(lambda: None),
    "load_ipython_extension": type(lambda: None),
    "spark": type(lambda: None),
    "unload_ipython_extension": type(lambda: None),
}


def test_public_names_have_their_documented_kinds() -> None:
    assert set(lakesession.__all__) == set(EXPECTED_KINDS), "a new public name: add its kind here"
    for name, kind in EXPECTED_KINDS.items():
        assert isinstance(getattr(lakesession, name), kind), f"lakesession.{name} is {getattr(lakesession, name)!r}"


@pytest.mark.slow  # imports every module of the package (~10 s: jupyterhub, jupyterlab, the reference server)
def test_no_public_name_is_shadowed_by_importing_every_submodule() -> None:
    before = public_types()
    import_all(submodules(client_only=False))
    after = public_types()
    assert after == before, {n: (before[n], after[n]) for n in before if before[n] is not after[n]}
    assert callable(lakesession.spark) and not isinstance(lakesession.spark, ModuleType)


def test_no_public_name_is_shadowed_by_load_ext_in_a_real_ipython_shell() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    before = public_types()
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "lakesession")
    try:
        assert "lakesession" in shell.magics_manager.magics["line"]
        assert public_types() == before
        result = shell.run_cell(
            "import lakesession; kinds = {n: type(getattr(lakesession, n)) for n in lakesession.__all__}"
        )
        assert result.success and shell.user_ns["kinds"] == before
    finally:
        shell.run_line_magic("unload_ext", "lakesession")


# -- 3. one error tree ---------------------------------------------------------------------------------------
def exception_classes(modules: list[ModuleType]) -> Iterator[tuple[str, type[BaseException]]]:
    for module in modules:
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                yield f"{module.__name__}.{obj.__qualname__}", obj


@pytest.mark.slow  # imports every client module (~9 s)
def test_every_client_exception_is_a_lakesession_error() -> None:
    found = dict(exception_classes(import_all(submodules(client_only=True))))
    assert "lakesession._spark.errors.CatalogAccessError" in found and "lakesession.errors.ConfigError" in found
    outside = [
        name
        for name, cls in found.items()
        if not issubclass(cls, LakesessionError)
        and name not in INTERNAL_EXCEPTIONS
        and not cls.__name__.startswith("_")  # private: never raised past the module that defines it
    ]
    assert not outside, f"exceptions outside the LakesessionError tree: {outside}"


def test_the_tree_is_drawn_and_reexported_by_each_room() -> None:
    from lakesession import credentials, identity
    from lakesession._spark import errors as spark_errors
    from lakesession.catalog import _chains
    from lakesession.notebook import _magics, _views

    doc = errors_mod.__doc__ or ""
    for name in errors_mod.__all__:
        cls = getattr(errors_mod, name)
        assert issubclass(cls, LakesessionError)
        assert name in doc, f"{name} is not drawn in lakesession.errors' docstring"
    assert identity.LoginRequiredError is errors_mod.LoginRequiredError
    assert identity.TokenRefreshError is errors_mod.TokenRefreshError
    assert credentials.CredentialsRevokedError is errors_mod.CredentialsRevokedError
    assert _chains.ViewChainError is errors_mod.ViewChainError
    assert _magics.MagicError is errors_mod.MagicError and _views.NoSessionError is errors_mod.NoSessionError
    from lakesession._spark import jars
    from lakesession.config import ConfigError

    assert jars.JavaNotFoundError is errors_mod.JavaNotFoundError and ConfigError is errors_mod.ConfigError
    assert issubclass(spark_errors.CatalogAccessError, errors_mod.CatalogAccessError)
    from pyspark.errors.exceptions.captured import CapturedException

    assert issubclass(spark_errors.CatalogAccessError, CapturedException)  # pyspark's handlers still see it
    assert issubclass(errors_mod.ConfigError, ValueError) and issubclass(errors_mod.UnknownOptionError, TypeError)


def test_configuration_mistakes_are_config_errors_that_say_how_to_fix_them() -> None:
    with pytest.raises(TypeError, match="warehous"):  # typed keywords: Python (and mypy, and an IDE) refuse a typo
        lakesession.connect(uri="http://127.0.0.1:9", token="t", warehous="typo")  # type: ignore[call-arg]
    with pytest.raises(errors_mod.ConfigError, match="no identity"):
        lakesession.connect(uri="http://127.0.0.1:9")
    with pytest.raises(errors_mod.ConfigError, match="s3-emulator"):
        lakesession.connect(storage="tape")._await_embedded()
    from lakesession.identity import from_issuer

    with pytest.raises(ValueError, match="flow must be"):  # still a ValueError for callers that catch one
        from_issuer("http://127.0.0.1:9", client_id="x", flow="magic")  # type: ignore[arg-type]


# -- 8. no import cycle -------------------------------------------------------------------------------------------
def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports, at any depth (module level, functions, methods, try blocks).

    Relative imports are resolved; ``from pkg import name`` points at ``pkg.name`` when that is a module,
    else at ``pkg``. Imports under ``if TYPE_CHECKING:`` do not count: they never run, so they cannot make
    an import cycle, and annotating a parameter with its real type (``session: Session``) beats a Protocol
    restating another module's privates or an ``Any``.
    """
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for node in runtime_nodes(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in files else source for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files and "." in target:
                    target = target.rpartition(".")[0]  # `import a.b.c` of a function or class: its module
                if target in files and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module, as one cycle through it (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_cycle_through(sorted(component), graph))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _cycle_through(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the component's first module back to itself (what to print)."""
    members = set(component)
    start = component[0]
    paths: dict[str, list[str]] = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    return component


def test_cycle_finder_sees_runtime_imports_at_any_depth_but_not_type_checking_ones(tmp_path: Path) -> None:
    pkg = tmp_path / "lakesession"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from .. import c\n")
    (pkg / "c.py").write_text("try:\n    import lakesession.a as a\nexcept ImportError:\n    pass\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    (pkg / "e.py").write_text("import os\nfrom lakesession.sub.b import name_in_b\n")
    # f <-> g only through annotations (as session.py and _spark/_plan.py): no cycle; h <-> i at run time: one
    (pkg / "f.py").write_text(
        "import typing\nif typing.TYPE_CHECKING:\n    from . import g\nelse:\n    from . import e\n"
    )
    (pkg / "g.py").write_text("def start():\n    from . import f\n")
    (pkg / "h.py").write_text("from typing import TYPE_CHECKING\nif not TYPE_CHECKING:\n    from . import i\n")
    (pkg / "i.py").write_text("def back():\n    from . import h\n")
    graph = import_graph(pkg)
    assert graph["lakesession.a"] == {"lakesession.sub.b"} and graph["lakesession.sub.b"] == {"lakesession.c"}
    assert graph["lakesession.d"] == set() and graph["lakesession.e"] == {"lakesession.sub.b"}
    assert graph["lakesession.f"] == {"lakesession.e"} and graph["lakesession.g"] == {"lakesession.f"}
    assert cycles(graph) == [
        ["lakesession.a", "lakesession.sub.b", "lakesession.c", "lakesession.a"],
        ["lakesession.h", "lakesession.i", "lakesession.h"],
    ]


def test_no_import_cycle_between_modules() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (one per strongly connected group):\n" + "\n".join(" -> ".join(c) for c in found)


def test_a_missing_spec_file_fails_the_spec_validation_loudly(tmp_path: Path) -> None:
    """Without the official spec the conformance checks must not quietly pass or skip."""
    import subprocess

    code = (
        "import pathlib, lakesession.reference.openapi as o\n"
        f"o.SPEC_PATH = pathlib.Path({str(tmp_path / 'gone.yaml')!r})\n"
        "import tests.spec_validation\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode != 0 and "FileNotFoundError" in out.stderr and "spec is missing" in out.stderr, out.stderr


@pytest.mark.slow  # the shared Spark JVM and an embedded catalog
def test_spark_works_twice_and_after_load_ext(lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The README's ``lakesession.spark()``: a second call, and a call after ``%load_ext lakesession``."""
    from IPython.core.interactiveshell import InteractiveShell

    from lakesession import _connect as session_mod

    for var in [k for k in __import__("os").environ if k.startswith(("LAKESESSION_", "PYICEBERG_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("LAKESESSION_HOME", str(tmp_path))  # the embedded default, in a fresh place
    monkeypatch.setenv("LAKESESSION_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    saved = session_mod._current
    session_mod._current = None
    shell = InteractiveShell.instance()
    try:
        first = lakesession.spark()
        assert lakesession.spark() is first
        shell.run_line_magic("load_ext", "lakesession")
        result = shell.run_cell("import lakesession\nagain = lakesession.spark()")
        assert result.success, result.error_in_exec
        assert shell.user_ns["again"] is first and isinstance(lakesession.spark, type(lambda: None))
        assert first.sql("SELECT 41 + 1").collect()[0][0] == 42
    finally:
        shell.run_line_magic("unload_ext", "lakesession")
        if session_mod._current is not None:
            session_mod._current.close()
        session_mod._current = saved
