"""``Containerfile.engine``, checked against the repository (no container runtime on the CI machines).

Like the catalog's ``Containerfile`` (``test_distributions.py``): what it copies exists, what it installs is
lakesession-engine (which owns the engine, with Spark Connect 4.1) on lakesession-client and lakesession-core — not
lakesession-catalog, none of the catalog server's stack, which the engine never imports (its modules' imports, followed through the package, say so) — what it runs is
``lakesession engine`` with flags its parser knows, and the engine's client secret reaches it only through a
variable or a file, never an argument (``ps`` shows arguments to every user of the host).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.project.test_distributions import SERVER_DOORS, SERVER_STACK, _imports, _module_name, _sources

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "Containerfile.engine"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the recipe, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in RECIPE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def _one(name: str) -> str:
    found = [args for word, args in _instructions() if word == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def _env() -> dict[str, str]:
    pairs: dict[str, str] = {}
    for word, args in _instructions():
        if word == "ENV":
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                pairs[key] = value
    return pairs


def _pyproject(folder: str) -> dict[str, object]:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def _installed_requirements() -> list[Requirement]:
    """Every requirement the recipe's ``pip install`` asks for: each local distribution's dependencies (and those
    of the extras it names), and what it names from an index."""
    (command,) = [args for word, args in _instructions() if word == "RUN" and "pip install" in args]
    words = shlex.split(command.split("pip install", 1)[1].split("&&", 1)[0])
    out: list[Requirement] = []
    for word in words:
        path, _, extras = word.partition("[")
        if path.startswith("/src/"):
            project = _pyproject(path.removeprefix("/src/"))
            out += [Requirement(r) for r in project["dependencies"]]  # type: ignore[attr-defined]
            for extra in filter(None, extras.rstrip("]").split(",")):
                out += [Requirement(r) for r in project["optional-dependencies"][extra]]  # type: ignore[index]
        else:
            out.append(Requirement(word))
    return out


def test_it_copies_what_exists_and_installs_the_engine_without_the_catalog_server() -> None:
    copies = [shlex.split(args)[:-1] for word, args in _instructions() if word == "COPY"]
    sources = [s for c in copies for s in c]
    assert sources and all((ROOT / s).exists() for s in sources), sources
    assert {"lakesession", "core", "client", "engine"} <= set(sources) and "catalog" not in sources
    runs = " ".join(args for word, args in _instructions() if word == "RUN")
    assert "pip install /src/core /src/client /src/engine" in runs and " -e " not in runs
    wanted = {canonicalize_name(r.name): r for r in _installed_requirements()}
    assert "lakesession" not in wanted and "lakesession-catalog" not in wanted  # the full and the server's: neither
    assert not SERVER_STACK & set(wanted), SERVER_STACK & set(wanted)
    assert not {"httptools", "limits", "psycopg"} & set(wanted)  # the rest of the server's own
    spark = [r for r in _installed_requirements() if canonicalize_name(r.name) == "pyspark" and "connect" in r.extras]
    assert spark and all(r.specifier.contains("4.1.0") and not r.specifier.contains("4.0.0") for r in spark)
    engine = tomllib.loads((ROOT / "engine" / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]
    assert engine["wheel"]["only-include"] == ["lakesession/engine"]  # the engine distribution ships the engine
    assert str(wanted["lakesession-client"].specifier) == f"=={_pyproject('engine')['version']}"
    assert "openjdk-17-jre-headless" in runs and _one("FROM").endswith("-bookworm")  # Debian 12 has OpenJDK 17


def test_the_engine_imports_nothing_of_the_catalog_server() -> None:
    """Every import of the engine's modules, followed through the package (function-level imports too): no
    module of the server (reference/), neither of the client's doors to it, none of the server's stack."""
    package = ROOT / "lakesession"
    modules = {_module_name(p): p for p in _sources(package)}
    todo = [m for m in modules if m.startswith("lakesession.engine")]
    assert "lakesession.engine._proxy" in todo
    seen: set[str] = set()
    outside: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in _imports(modules[module]):
            if not name.startswith("lakesession"):
                outside.add(name.split(".")[0])
                continue
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                todo.append(name)
    assert [m for m in seen if m.startswith("lakesession.reference") or m in SERVER_DOORS] == []
    assert not outside & SERVER_STACK, outside & SERVER_STACK
    assert {"pyspark", "grpc", "hypercorn"} <= outside  # what it does import: Spark Connect and the gateway's server


def test_it_runs_lakesession_engine_with_flags_the_engine_knows() -> None:
    from lakesession.cli import build_parser as cli_parser
    from lakesession.engine._cli import build_parser

    argv = json.loads(_one("ENTRYPOINT"))
    assert argv[:2] == ["lakesession", "engine"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["lakesession"] == "lakesession.cli:main"
    assert cli_parser().parse_known_args(["engine"])[0].command == "engine"
    parser = build_parser()
    known = {opt for action in parser._actions for opt in action.option_strings}
    flags = [a for a in argv[2:] if a.startswith("--")]
    assert flags and set(flags) <= known, set(flags) - known
    args = parser.parse_args(argv[2:])  # each flag with a value of the right type
    assert args.host == "0.0.0.0" and args.port == 15002


def test_it_exposes_the_engines_port_and_runs_as_a_user() -> None:
    from lakesession.engine import EngineConfig

    default_port = {f.name: f.default for f in dataclasses.fields(EngineConfig)}["port"]
    assert _one("EXPOSE") == str(default_port) == "15002"
    assert _one("USER") not in ("root", "0")
    assert "15002" in _one("HEALTHCHECK")


def test_the_secret_comes_from_a_variable_or_a_file_never_an_argument() -> None:
    from lakesession._settings import ENVIRONMENT
    from lakesession.engine._cli import build_parser

    known = {opt for action in build_parser()._actions for opt in action.option_strings}
    assert not any("secret" in opt and not opt.endswith("-file") for opt in known)  # no --client-secret at all
    text = RECIPE.read_text()
    assert not re.search(r"--client-secret(?!-file)", text)
    env = _env()
    assert "LAKESESSION_ENGINE_CLIENT_SECRET" not in env  # no secret baked into the image
    assert env["LAKESESSION_ENGINE_CLIENT_SECRET_FILE"].startswith("/run/secrets/")
    assert not [w for w, _ in _instructions() if w == "ARG"]  # build arguments end up in the image's history
    names = {v.name for v in ENVIRONMENT}
    assert {k for k in env if k.startswith("LAKESESSION_")} <= names  # only variables lakesession reads
