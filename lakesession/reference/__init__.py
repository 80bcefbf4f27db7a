"""The reference Iceberg REST catalog: OIDC issuer, RBAC, audit — in-process or standalone.

It never imports the client half of lakesession.
"""

from .bootstrap import Bootstrap, BootstrapError
from .server import Admin, ClientCredentials, ReferenceCatalog, start
from .settings import ServerSettings

__all__ = ["Admin", "Bootstrap", "BootstrapError", "ClientCredentials", "ReferenceCatalog", "ServerSettings", "start"]
