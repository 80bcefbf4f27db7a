"""``Containerfile.engine``, checked against the repository (no container runtime on the CI machines).

Like the catalog's ``Containerfile`` (``test_distributions.py``): what it copies exists, what it installs is
the full distribution with Spark Connect, what it runs is ``lakesession engine`` with flags its parser
knows, and the engine's client secret reaches it only through a variable or a file, never an argument
(``ps`` shows arguments to every user of the host).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import tomllib
from pathlib import Path

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


def test_it_copies_what_exists_and_installs_the_full_distribution_with_spark_connect() -> None:
    copies = [shlex.split(args)[:-1] for word, args in _instructions() if word == "COPY"]
    sources = [s for c in copies for s in c]
    assert sources and all((ROOT / s).exists() for s in sources), sources
    assert {"lakesession", "pyproject.toml"} <= set(sources)
    runs = " ".join(args for word, args in _instructions() if word == "RUN")
    assert '-e "/src[connect]"' in runs  # the full distribution (the slim ones leave the engine out)
    assert "connect" in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert '"pyspark[connect]>=4.1,<4.2"' in runs  # the engine is Spark Connect on Spark 4.1
    assert "openjdk-17-jre-headless" in runs and _one("FROM").endswith("-bookworm")  # Debian 12 has OpenJDK 17


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
