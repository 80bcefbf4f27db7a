"""lakesession: PySpark on Iceberg REST catalogs as your SSO identity.

    import lakesession
    spark = lakesession.spark()          # embedded catalog + demo user when nothing is configured
    session = lakesession.connect(uri="https://catalog.example.com", credential="id:secret", token_url=...)
"""

from .session import Session, connect, current_session, spark

__version__ = "0.1.0"

__all__ = ["Session", "__version__", "connect", "current_session", "spark"]
