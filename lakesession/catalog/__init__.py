"""Catalog access from Python: pyiceberg's RestCatalog acting as the session's identity."""

from ._pyiceberg import TokenSourceAuthManager, rest_catalog

__all__ = ["TokenSourceAuthManager", "rest_catalog"]
