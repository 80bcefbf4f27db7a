"""``binder/`` builds a working environment from scratch, the way repo2docker would, and runs a notebook there.

repo2docker (what Binder runs) installs ``binder/requirements.txt`` into a fresh Python environment of
the version ``binder/runtime.txt`` names, runs ``binder/postBuild`` from the repository root, and starts
every process through ``binder/start``. This test does the same in a clean venv (apt.txt's Java is the
machine's own), adds what repo2docker's base image carries for running notebooks (nbclient), and then
executes the quickstart notebook in that venv's kernel through ``binder/start``: a missing dependency in
``binder/`` fails here, not on a user's first Binder launch.

The installs go through uv (the same requirements, from its cache under ``~/.cache/lakesession/uv`` first,
online only when it lacks something; ``BINDER_UV`` tells ``postBuild``): pip resolved, unpacked and
byte-compiled the ~90 packages in 5 min on an idle CI machine, uv links them from its cache in seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from uv import find_uv_bin

from lakesession.lab import _build as labextension

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"

pytestmark = pytest.mark.slow  # a fresh venv (uv, from its cache) and a Spark JVM


def _install(uv: str, python: Path, *args: str, cwd: Path, env: dict[str, str]) -> None:
    """``uv pip install`` into ``python``'s venv: offline first (uv would otherwise re-download pyspark's sdist
    and rebuild it on every install), online only on a cold cache."""
    cmd = [uv, "pip", "install", "--quiet", "--python", str(python), *args]
    if subprocess.run([*cmd, "--offline"], cwd=cwd, env=env, capture_output=True, timeout=600).returncode != 0:
        _run(cmd, cwd=cwd, env=env, timeout=900)


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def test_runtime_names_the_python_the_project_supports() -> None:
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime.startswith("python-3.") and int(runtime.split(".")[1]) >= 11


@pytest.mark.timeout(2400)  # installs a whole environment (cold uv cache: downloads it)
def test_binder_environment_builds_from_scratch_and_runs_the_quickstart(tmp_path: Path) -> None:
    assert shutil.which("java"), "apt.txt's Java (openjdk-17) is needed: .ci/run installs it"
    uv = find_uv_bin()
    env_dir = tmp_path / "binder-env"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "LAKESESSION_", "UV_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(env_dir),
        HOME=str(Path.home()),  # the machine's pip and jar caches, as a rebuilt Binder image has its layer cache
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        BINDER_PIP_CACHE="1",  # only the download cache differs from Binder: the same packages are installed
        BINDER_UV=uv,  # ... and the installer: postBuild installs the same requirement through uv
        UV_CACHE_DIR=str(labextension.cache_dir() / "uv"),  # test_slim_install's cache: pyspark built once
        LAKESESSION_HOME=str(tmp_path / "home"),
    )
    python = bin_dir / "python"
    _install(uv, python, "-r", str(BINDER / "requirements.txt"), cwd=ROOT, env=env)
    # repo2docker's base environment runs notebooks; nbclient is that part of it
    _install(uv, python, "nbclient>=0.10", "nbformat>=5", cwd=ROOT, env=env)
    _run(["bash", str(BINDER / "postBuild")], cwd=ROOT, env=env, timeout=1500)
    listed = _run([str(bin_dir / "python"), "-m", "pip", "list", "--format=freeze"], cwd=ROOT, env=env, timeout=120)
    assert "lakesession==" in listed and "ipywidgets==" in listed
    out = tmp_path / "quickstart.out.ipynb"
    code = (
        "import nbformat, sys\n"
        "from nbclient import NotebookClient\n"
        f"nb = nbformat.read({str(ROOT / 'notebooks' / 'quickstart.ipynb')!r}, as_version=4)\n"
        f"NotebookClient(nb, timeout=600, kernel_name='python3', resources={{'metadata': {{'path': {str(tmp_path)!r}}}}}).execute()\n"
        f"nbformat.write(nb, {str(out)!r})\n"
        "expected = lambda c: 'raises-exception' in c.get('metadata', {}).get('tags', [])\n"
        "errors = [o for c in nb.cells if not expected(c) for o in c.get('outputs', []) if o.get('output_type') == 'error']\n"
        "sys.exit(1 if errors else 0)\n"
    )
    _run(["bash", str(BINDER / "start"), str(bin_dir / "python"), "-c", code], cwd=tmp_path, env=env, timeout=1500)
    assert out.exists()
    kernel_python = _run(
        ["bash", str(BINDER / "start"), str(bin_dir / "python"), "-c", "import sys; print(sys.prefix)"],
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert kernel_python.strip() == str(env_dir) != sys.prefix  # the notebook ran in the Binder venv, not ours
