"""lakesession: PySpark on Iceberg REST catalogs as your SSO identity.

import lakesession
spark = lakesession.spark()          # embedded catalog + demo user when nothing is configured
session = lakesession.connect(uri="https://catalog.example.com", credential="id:secret", token_url=...)
"""

from ._connect import connect, current_session, spark
from ._settings import Settings
from .notebook import load_ipython_extension, unload_ipython_extension
from .session import Session

__version__ = "0.1.0"

__all__ = [
    "Session",
    "Settings",
    "__version__",
    "connect",
    "current_session",
    "load_ipython_extension",
    "spark",
    "unload_ipython_extension",
]
