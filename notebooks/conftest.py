"""nbval runs these notebooks; here each is marked slow and, after its last cell, scanned for secrets.

The scan step runs the collector from tests/security/test_notebook_secrets.py in the notebook's still
running kernel (so the notebooks execute only once), then looks for every secret it found in
the outputs nbval recorded for that notebook's cells.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import pytest

from tests.security.test_notebook_secrets import COLLECT, output_texts, scan

HERE = os.path.dirname(os.path.abspath(__file__))


class SecretScan(pytest.Item):
    """The last item of a notebook: no output of its cells shows a secret alive in its kernel."""

    def __init__(self, *, cells: list[Any], **kwargs: Any):
        super().__init__(**kwargs)
        self.cells = cells
        self.add_marker("slow")

    def runtest(self) -> None:
        kernel = self.parent.kernel
        assert kernel is not None and kernel.is_alive(), "the notebook's kernel is gone: cannot collect its secrets"
        fd, path = tempfile.mkstemp(prefix="lakesession-secrets-", suffix=".json")
        os.close(fd)
        try:
            code = (
                COLLECT + f"\nimport json as _j\nwith open({path!r}, 'w') as _f:\n"
                "    _f.write(_j.dumps(_lakesession_collect_secrets()))\n"
            )
            msg_id = kernel.execute_cell_input(code, allow_stdin=False)
            while True:
                reply = kernel.get_message(stream="shell", timeout=120)
                if reply["parent_header"].get("msg_id") == msg_id:
                    break
            content = reply["content"]
            assert content["status"] == "ok", (
                f"the secret collector failed: {content.get('ename')}: {content.get('evalue')}"
            )
            with open(path) as f:
                secrets = json.load(f)
        finally:
            os.unlink(path)
        assert secrets, "the collector found no secret in the kernel (it should at least find a token)"
        outputs = [o for cell in self.cells for o in (cell.test_outputs or [])]
        hits = scan(output_texts(outputs), secrets)
        assert not hits, f"{self.parent.name}: secrets in the outputs: {hits}"

    def reportinfo(self) -> tuple[Any, int, str]:
        return self.path, 0, f"{self.parent.name}::secret-scan"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which names each test by its xdist_group
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each notebook's cells, then its scan, are slow and one xdist group: they share one kernel, in order."""
    by_file: dict[Any, list[pytest.Item]] = {}
    for item in items:
        if type(item).__name__ == "IPyNbCell" and str(item.path).startswith(HERE):
            item.add_marker("slow")
            by_file.setdefault(item.parent, []).append(item)
    for parent, cells in by_file.items():
        scan_item = SecretScan.from_parent(parent, name="secret-scan", cells=cells)
        items.insert(items.index(cells[-1]) + 1, scan_item)
        group = pytest.mark.xdist_group(cells[0].nodeid.split("::", 1)[0])
        for item in (*cells, scan_item):
            item.add_marker(group)
