"""lakesession: PySpark on Iceberg REST catalogs as your SSO identity."""

__version__ = "0.1.0"
