"""Catalog access from Python: pyiceberg's RestCatalog acting as the session's identity."""

from ..errors import CapabilityError
from ._pyiceberg import TokenSourceAuthManager, rest_catalog

__all__ = ["CapabilityError", "TokenSourceAuthManager", "rest_catalog"]
