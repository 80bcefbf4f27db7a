"""Server side of the JupyterLab panel: ``GET <base_url>/lakesession/status``.

Returns ``{"time": <server clock>, "kernels": [{kernel_id, kernel_name, path, updated, sessions:
[Session.status() ...]}]}`` for the kernels this server still runs, read from the status files
their publishers write (``lakesession.lab._publisher``). Authenticated like every Jupyter API;
no secret ever reaches it (the publisher writes secret-free documents and both sides scrub).
"""

from __future__ import annotations

import json
import time
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from ._status import read_entries

ROUTE = "lakesession/status"


class StatusHandler(APIHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        km = self.kernel_manager
        running = list(km.list_kernel_ids())
        entries = read_entries(km.connection_dir, running)
        paths: dict[str, str] = {}
        names: dict[str, str] = {}
        try:
            for s in await self.session_manager.list_sessions():
                k = s.get("kernel") or {}
                if k.get("id"):
                    paths[k["id"]] = s.get("path") or s.get("name") or ""
                    names[k["id"]] = k.get("name") or ""
        except Exception:  # sessions are decoration: the kernels' statuses still go out
            pass
        kernels: list[dict[str, Any]] = []
        for doc in entries:
            kid = doc["kernel_id"]
            doc.pop("pid", None)
            kernels.append({**doc, "path": paths.get(kid), "kernel_name": names.get(kid)})
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps({"time": time.time(), "kernels": kernels}, default=str))


def setup_handlers(serverapp: Any) -> None:
    web_app = serverapp.web_app
    base_url = web_app.settings["base_url"]
    web_app.add_handlers(".*$", [(url_path_join(base_url, ROUTE), StatusHandler)])
    serverapp.log.info("lakesession: serving kernel session status at %s", url_path_join(base_url, ROUTE))
