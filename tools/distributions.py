"""The slim distributions' pyproject files, generated from one table (mlflow's ``dev/pyproject.py`` habit).

lakesession's one import package ships as four slim distributions that own disjoint files of it (pip uninstalls
a distribution by removing every file its RECORD lists, so no file may have two owners) plus the full one:

- ``lakesession-core``: only what the catalog and the client both import (the package's lazy ``__init__``, the wire
  rules, the error tree), so that a catalog-server image carries ~1.4k lines of the client half, not 16k;
- ``lakesession-client``: the client, i.e. the package minus everything the others own;
- ``lakesession-catalog``: the catalog server (``reference/``);
- ``lakesession-engine``: the trusted engine (``engine/``), on top of the client at the same version.

Each folder holds a ``lakesession`` symlink to the package and the ``pyproject.toml`` written here; the root
``pyproject.toml`` (the full distribution, with its build hook and dev extras) stays hand-written, and
``tests/project/test_distributions.py`` checks that it carries the union of these dependencies, that the files
below are current (regenerated in memory) and that the owned paths split the package with no overlap.

    python tools/distributions.py           # rewrite core/, client/, catalog/, engine/pyproject.toml
    python tools/distributions.py --check   # exit 1 naming the stale ones
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: one version for every distribution: the full one's (the slim ones pin each other to it)
VERSION: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
#: built or ignored files under the package that no slim wheel ships (the full wheel ships the frontend as data)
ARTEFACTS = ("lakesession/lab/labextension", "lakesession/lab/labextension.tmp", "lakesession/lab/.gitignore")

#: why a requirement is there (or pinned so), written above it in every pyproject that lists it
NOTES: dict[str, str] = {
    "hypercorn>=0.17": "the gateway's ASGI server (uvicorn stays the catalog server's)",
    "s3fs>=2026.9.0": "remote-signing reads from Python (pyiceberg's FsspecFileIO + the catalog's signer)",
    "boto3>=1.43.115,<1.43.118": (
        "boto3 pins botocore to its own patch release and aiobotocore (s3fs's) pins botocore to a narrow range:\n"
        "unbounded, pip tried the newest boto3 first and backtracked through ~23 boto3 and 33 aiobotocore releases\n"
        "(19 min on a loaded machine, #42). These bounds are the ones that meet (aiobotocore 3.10.0: botocore\n"
        ">=1.43.115,<1.43.118)."
    ),
    "uvloop>=0.19; sys_platform != 'win32'": (
        "the catalog server's event loop (libuv, in C): asyncio's own loop was a fifth of a loadTable's CPU"
    ),
    "moto[s3]==5.2.1": "the embedded S3/STS emulator (moto pinned: lakesession hooks its policy checks)",
    "pyspark>=3.5,<4.2": "Spark 3.5, 4.0, 4.1: the lines with an Iceberg Spark runtime (lakesession/_spark/versions.py)",
    "pyspark[connect]>=4.1,<4.2": "Spark Connect's server side is Spark 4.1's (= the full distribution's [engine] extra)",
}
#: written above the slim distributions a distribution installs
REQUIRES_NOTE = "the package's other files, from the slim distribution(s) at this very version"


@dataclass(frozen=True)
class Distribution:
    """One slim distribution: where it is built, what of the package it owns, what it needs."""

    folder: str
    name: str
    description: str
    #: the comment heading its pyproject: what it is for and how to install it
    header: str
    #: package paths (files or folders) it owns; ``("lakesession",)`` means "whatever the others do not own"
    owns: tuple[str, ...]
    dependencies: tuple[str, ...]
    extras: dict[str, tuple[str, ...]] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)
    #: the other slim distributions it installs, at this very version
    requires: tuple[str, ...] = ()


CORE = Distribution(
    folder="core",
    name="lakesession-core",
    description="The lakesession package's shared files: installed with lakesession-client or lakesession-catalog",
    header=(
        "lakesession-core: the files of the `lakesession` package that lakesession-client and lakesession-catalog\n"
        "both import (the AST import graph in tests/project/test_distributions.py proves it): the package's lazy\n"
        "__init__, the wire rules both halves follow (_wire/), the error tree and py.typed. It owns them so that the\n"
        "other distributions own no file in common (pip uninstalls a distribution by removing every file its RECORD\n"
        "lists); they depend on it at their own version. Never installed alone."
    ),
    owns=("lakesession/__init__.py", "lakesession/py.typed", "lakesession/errors.py", "lakesession/_wire"),
    # exactly what those files import (tests/project/test_distributions.py compares)
    dependencies=("httpx>=0.27", "joserfc>=1.0", "sqlglot>=30"),
)

CATALOG = Distribution(
    folder="catalog",
    name="lakesession-catalog",
    description="The lakesession reference Iceberg REST catalog server (OIDC issuer, RBAC, STS vending, signing, audit)",
    header=(
        "lakesession-catalog: the catalog server alone (the reference Iceberg REST catalog, its OIDC issuer, RBAC,\n"
        "credential vending, remote signing, audit), for a team's server or a container (the root Containerfile):\n"
        "`pip install ./core './catalog[postgres]'`. It owns lakesession/reference/ and needs only the core besides:\n"
        "no client module, no Spark, no Jupyter. Its entry point `lakesession-catalog` = `lakesession serve`."
    ),
    owns=("lakesession/reference",),
    dependencies=(
        "pyiceberg[sql-sqlite,pyarrow]>=0.12,<0.13",
        "fastapi>=0.110",
        "uvicorn>=0.29",
        "httptools>=0.6",
        "uvloop>=0.19; sys_platform != 'win32'",
        "authlib>=1.6",
        "limits>=4.1",
        "joserfc>=1.0",
        "sqlalchemy>=2.0",
        "alembic>=1.13",
        "httpx>=0.27",
        "pyyaml>=6",
        "sqlglot>=30",
        "typing_extensions>=4.12",
        "boto3>=1.43.115,<1.43.118",
        "cryptography>=42",
        "moto[s3]==5.2.1",
        "flask>=3",
        "flask-cors>=4",
    ),
    extras={
        "postgres": ("psycopg[binary]>=3.1",),
        "azure": ("azure-storage-blob>=12.20", "azure-storage-file-datalake>=12.15"),
        "gcs": ("google-auth>=2.30",),
    },
    scripts={"lakesession-catalog": "lakesession.reference.servecmd:main"},
    requires=("lakesession-core",),
)

ENGINE = Distribution(
    folder="engine",
    name="lakesession-engine",
    description="The lakesession trusted engine: Spark Connect acting for each authenticated user (DEFINER views)",
    header=(
        "lakesession-engine: the trusted engine (`lakesession engine`, Containerfile.engine): Spark Connect acting for\n"
        "each authenticated user. It owns lakesession/engine/ (with the sandbox's own JVM jar) and runs on the client\n"
        "(its gateway, identity, Spark and jar modules, the credential providers' jar), which it installs at this very version:\n"
        "`pip install ./core ./client ./engine`. None of the catalog server's stack."
    ),
    owns=("lakesession/engine",),
    dependencies=("pyspark[connect]>=4.1,<4.2",),
    requires=("lakesession-client",),
)

CLIENT = Distribution(
    folder="client",
    name="lakesession-client",
    description="The lakesession client alone: PySpark on Iceberg REST catalogs as your SSO identity (no catalog server)",
    header=(
        "lakesession-client: the client half alone (PySpark as your SSO identity, vended credentials, the loopback\n"
        "gateway, widgets, the `lakesession` command): the package minus what the core, the catalog server and the\n"
        "engine own, without the server's stack (FastAPI, uvicorn, SQLAlchemy, Alembic, moto, Flask).\n"
        "`pip install ./core ./client`; it connects to a running catalog. The embedded default and `lakesession serve`\n"
        "need the full distribution and say so in one line (lakesession.errors.FULL_INSTALL); `lakesession engine`\n"
        "needs lakesession-engine."
    ),
    owns=("lakesession",),
    dependencies=(
        "pyiceberg[pyarrow]>=0.12,<0.13",
        "httpx>=0.27",
        "hypercorn>=0.17",
        "authlib>=1.6",
        "joserfc>=1.0",
        "cryptography>=42",
        "pyyaml>=6",
        "pandas>=2",
        "pyspark>=3.5,<4.2",
        "sqlglot>=30",
        "typing_extensions>=4.12",
        "s3fs>=2026.9.0",
    ),
    extras={
        "notebook": ("ipython>=8", "ipykernel>=6", "ipywidgets>=8,<9"),
        "hub": ("jupyterhub>=5", "oauthenticator>=17.3"),
        "connect": ("pyspark[connect]>=3.5,<4.2",),
        "azure": ("adlfs>=2024.12",),
    },
    scripts={"lakesession": "lakesession.cli:main"},
    requires=("lakesession-core",),
)

DISTRIBUTIONS: tuple[Distribution, ...] = (CORE, CLIENT, CATALOG, ENGINE)

# -- the full distribution (root pyproject.toml, hand-written) against the table --------------------------------------
#: dependencies only the full distribution has, with why
FULL_ONLY = {
    "aiobotocore": "s3fs (client) and boto3 (catalog) meet only at this release line: the full install has both",
}
#: the full extras that are a slim distribution's own dependencies
FULL_EXTRA_OF = {"lakesession-engine": "engine"}
#: specifiers the full distribution narrows, with why
FULL_PINS = {"s3fs": "pinned to the release whose aiobotocore meets the catalog's boto3 bound (FULL_ONLY)"}


def excluded(dist: Distribution) -> tuple[str, ...]:
    """What ``dist``'s build leaves out of its ``owns``: the others' paths under it, and built artefacts."""
    if dist.owns != ("lakesession",):
        return ()
    return (*(p for other in DISTRIBUTIONS if other is not dist for p in other.owns), *ARTEFACTS)


def requirements(dist: Distribution) -> list[str]:
    """Every requirement of ``dist``, as written: the other slim distributions at this version, then its own."""
    return [f"{name}=={VERSION}" for name in dist.requires] + list(dist.dependencies)


def _strings(items: list[str], *, notes: bool = False) -> str:
    """A TOML array of strings, one a line (JSON strings are TOML basic strings); requirements with their note."""
    if not notes and len(items) <= 1:
        return json.dumps(items)
    lines = ["["]
    for item in items:
        note = "" if not notes else REQUIRES_NOTE if item.startswith("lakesession-") else NOTES.get(item, "")
        lines += [f"    # {line}" for line in note.splitlines()]
        lines.append(f"    {json.dumps(item)},")
    return "\n".join([*lines, "]"])


def render(dist: Distribution) -> str:
    """``dist``'s pyproject.toml."""
    out = [f"# {line}".rstrip() for line in dist.header.splitlines()]
    out += [
        "#",
        "# GENERATED by tools/distributions.py from its table: edit there, then `python tools/distributions.py`",
        "# (tests/project/test_distributions.py fails while this file differs from what it writes).",
        "[build-system]",
        'requires = ["hatchling>=1.22"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        f"name = {json.dumps(dist.name)}",
        f"version = {json.dumps(VERSION)}",
        f"description = {json.dumps(dist.description)}",
        'readme = "README.md"',
        'requires-python = ">=3.11"',
        'license = "Apache-2.0"',
        f"dependencies = {_strings(requirements(dist), notes=True)}",
    ]
    if dist.extras:
        out += ["", "[project.optional-dependencies]"]
        out += [f"{k} = [{', '.join(json.dumps(r) for r in v)}]" for k, v in dist.extras.items()]
    if dist.scripts:
        out += ["", "[project.scripts]"] + [f"{k} = {json.dumps(v)}" for k, v in dist.scripts.items()]
    for target in ("wheel", "sdist"):
        out += ["", f"[tool.hatch.build.targets.{target}]", f"only-include = {json.dumps(list(dist.owns))}"]
        out.append(f"exclude = {_strings([*excluded(dist), '__pycache__'])}")
    return "\n".join(out) + "\n"


def stale() -> list[Path]:
    """The committed pyproject files that differ from what :func:`render` writes."""
    paths = {ROOT / d.folder / "pyproject.toml": d for d in DISTRIBUTIONS}
    return [p for p, d in paths.items() if not p.is_file() or p.read_text() != render(d)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"stale: {path.relative_to(ROOT)} (run python tools/distributions.py)", file=sys.stderr)
        return 1 if old else 0
    for dist in DISTRIBUTIONS:
        (ROOT / dist.folder / "pyproject.toml").write_text(render(dist))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
