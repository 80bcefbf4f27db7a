"""Issue #43: a Session's start-up has one owner, and the client names the Session by its real type.

The start plan (``lakesession/_spark/_plan.py``) takes a frozen ``StartInput`` and returns what it started;
only ``Session`` sets its own fields. Modules that take a session say ``session: Session`` (imported under
``TYPE_CHECKING``, which the cycle rule of ``test_structure.py`` ignores), never ``Any``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lakesession

PACKAGE = Path(lakesession.__file__).parent
PLAN = PACKAGE / "_spark" / "_plan.py"


def _root_name(node: ast.expr) -> str | None:
    """``a`` of ``a.b.c`` / ``a.b[0]``; None for anything else."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _stored_attributes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every attribute assigned in ``tree``: ``x.y = …``, ``x.y += …``, ``x.y: T = …``,
    in tuples, and ``setattr(x, …)`` / ``object.__setattr__(x, …)``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("setattr", "__setattr__", "delattr"):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_finder_of_assigned_attributes_sees_each_way_of_assigning(tmp_path: Path) -> None:
    source = (
        "session._gateway = g\n"
        "session.a, other.b = 1, 2\n"
        "session._n += 1\n"
        "holder.x: int = 3\n"
        "setattr(session, '_spark', s)\n"
        "object.__setattr__(start, 'x', 1)\n"
        "local = session._gateway\n"  # a read: not an assignment
    )
    found = {text for _, text in _stored_attributes(ast.parse(source))}
    assert found == {
        "session._gateway",
        "session.a",
        "other.b",
        "session._n",
        "holder.x",
        "setattr(session, '_spark', s)",
        "object.__setattr__(start, 'x', 1)",
    }


def test_the_start_plan_assigns_no_session_field_and_restates_no_session_member() -> None:
    tree = ast.parse(PLAN.read_text(), str(PLAN))
    stored = _stored_attributes(tree)
    assert not stored, f"{PLAN.name} assigns attributes (the Session takes what the plan returns): {stored}"
    protocols = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any("Protocol" in ast.unparse(base) for base in node.bases)
    ]
    assert not protocols, f"{PLAN.name} declares Protocols {protocols}: take a StartInput field instead"
    privates = sorted(
        {
            f"{_root_name(node)}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and _root_name(node) in ("session", "holder")
        }
    )
    assert not privates, f"{PLAN.name} reads a Session's privates: {privates}"


def test_the_session_takes_its_spark_and_gateway_from_what_the_plan_returned() -> None:
    from lakesession._spark._plan import Started, StartInput, StartPlan

    for frozen in (StartInput, Started):
        assert frozen.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert set(Started.__dataclass_fields__) == {"spark", "gateway"}
    run = StartPlan.run.__annotations__
    assert run["return"] == "Started" and run["start"] == "StartInput"


def _any_annotated_sessions(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """``file:line: name`` of each parameter or annotated variable called ``session`` (or ``*_session``) typed
    ``Any``, in line order."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []

    def check(name: str, annotation: ast.expr | None, line: int) -> None:
        if annotation is None or not (name == "session" or name.endswith("_session")):
            return
        text = ast.unparse(annotation).strip("'\"")
        if text in ("Any", "typing.Any", "Any | None", "Optional[Any]"):
            found.append((line, f"{path.relative_to(root)}:{line}: {name}: {text}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            check(node.arg, node.annotation, node.lineno)
        elif isinstance(node, ast.AnnAssign):
            target = node.target
            name = (
                target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
            )
            check(name, node.annotation, node.lineno)
    return [text for _, text in sorted(found)]


def test_no_session_is_typed_any_anywhere_in_the_package(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import Any\n"
        "def f(session: Any, other: Any, x_session: 'Any' = None) -> None: ...\n"
        "_session: Any = None\n"
        "def g(session: Session) -> None: ...\n"
    )
    assert _any_annotated_sessions(sample, tmp_path) == [
        "sample.py:2: session: Any",
        "sample.py:2: x_session: Any",
        "sample.py:3: _session: Any",
    ]
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _any_annotated_sessions(path)]
    assert not found, "sessions typed Any (import Session under TYPE_CHECKING instead):\n" + "\n".join(found)
