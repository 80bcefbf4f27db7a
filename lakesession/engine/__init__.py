"""The trusted engine: a platform-run Spark Connect service acting for authenticated users.

``lakesession engine`` (``Engine``) lets a notebook user query DEFINER views without ever holding
the underlying tables' storage credentials: it authenticates each call's OIDC token, acts on the
catalog as *the engine for that user* (RFC 8693 token exchange), refuses user code, path access
and protected settings (``_sandbox`` at the front door, ``dev.lakesession.engine.SandboxExtensions``
in the JVM), and keeps vended credentials inside itself. See docs/how-to/engine.md.

Full distribution only (it runs Spark and imports the client half's gateway); never imports
``lakesession.reference``.
"""

from ._config import EngineConfig
from ._engine import Engine
from ._sandbox import RULES, Refused

__all__ = ["RULES", "Engine", "EngineConfig", "Refused"]
