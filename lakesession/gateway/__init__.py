"""The loopback gateway between the Spark JVM and the catalog.

The JVM's Iceberg REST client talks to the gateway with a random per-session
secret; the gateway forwards each call upstream as the user. The user's token
never enters the JVM.
"""

from ._accesslog import AccessLog, AccessRecord
from ._allow import gateway_clients
from ._gateway import Gateway

__all__ = ["AccessLog", "AccessRecord", "Gateway", "gateway_clients"]
