"""Registered storage locations: raw ``s3://`` prefixes as securables (``location s3://b/raw/``).

Why: readers that bypass Iceberg (Comet's native Parquet scans, ``spark.read.parquet("s3a://…")``,
pandas/pyarrow through ``Session.filesystem``) need credentials for paths no table owns. An admin
registers such a prefix and grants ``LOCATION_READ`` / ``LOCATION_WRITE`` on it; the catalog then
vends credentials whose session policy covers exactly that prefix.

A location is a row of the storage-ownership index (``locations.LocationIndex``) with owner kind
``location``, so the index's rules keep it apart from every table, view and namespace home: a grant
on a location never reaches a table's data, and no table can be created inside a location. It must
also lie outside the warehouse root (tables own the warehouse) and below a bucket (never a whole bucket).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import delete

from . import store
from .authz import LOCATION_SCHEMES, normalize_location
from .errors import BadRequest, NotFound
from .locations import LOCATION, LocationIndex, Owner
from .storage.policy import split_s3_location

logger = logging.getLogger(__name__)

#: ``Services.extras`` key of a callable making a registered location's bucket exist (the S3 emulator's
#: ``create_bucket``): on real S3 an admin registers a prefix of a bucket that exists; on the emulator, a
#: location such as ``s3://raw-bucket/landing/`` would otherwise answer ``NoSuchBucket``
BUCKET_MAKER = "location_bucket_maker"


def owner(prefix: str) -> Owner:
    """The index owner of a normalised location prefix (a digest: prefixes may be longer than a name column)."""
    return Owner(LOCATION, (), hashlib.sha256(prefix.encode()).hexdigest()[:40])


def check(url: str, warehouse: str) -> str:
    """The normalised prefix of a location to register, or ``BadRequest`` saying what to change."""
    if not isinstance(url, str) or not url.strip().startswith(LOCATION_SCHEMES):
        raise BadRequest(f"Invalid storage location {url!r}: expected an s3 prefix such as s3://raw-bucket/landing/")
    prefix = normalize_location(url)
    try:
        _, key = split_s3_location(prefix)
    except ValueError as e:
        raise BadRequest(f"Invalid storage location {url!r}: {e}") from None
    segments = key.split("/")
    if not key or "" in segments or "." in segments or ".." in segments or not prefix.isprintable():
        raise BadRequest(
            f"Invalid storage location {url!r}: it must name a prefix below a bucket, without empty, '.' or "
            "'..' segments (e.g. s3://raw-bucket/landing/)"
        )
    root = normalize_location(warehouse)
    if prefix.startswith(root) or root.startswith(prefix):
        raise BadRequest(
            f"Invalid storage location {url!r}: it overlaps the warehouse {warehouse!r}, whose storage belongs to "
            "tables; register a prefix outside it"
        )
    return prefix


def register(index: LocationIndex, url: str, extras: dict[str, Any] | None = None) -> str:
    """Register ``url`` (idempotent); ``BadRequest`` if it overlaps anything else's storage. With the S3
    emulator behind the catalog (``extras[BUCKET_MAKER]``), the location's bucket is made to exist too."""
    prefix = check(url, index.root)
    index.claim(owner(prefix), [(prefix, "storage location")])
    make_bucket(extras, prefix)
    return prefix


def make_bucket(extras: dict[str, Any] | None, prefix: str) -> None:
    """Create ``prefix``'s bucket when the catalog's store can (the emulator); a bucket it cannot create (its
    name taken by another emulator in this process) is logged: the registration stands, as it would on S3."""
    maker: Callable[[str], None] | None = (extras or {}).get(BUCKET_MAKER)
    if maker is None:
        return
    bucket, _ = split_s3_location(prefix)
    try:
        maker(bucket)
    except ValueError as e:
        logger.warning("storage location %s: the S3 emulator cannot create bucket %r: %s", prefix, bucket, e)


def unregister(index: LocationIndex, url: str) -> str:
    """Forget a location and every grant on it (a later registration of the prefix starts without grants)."""
    prefix = normalize_location(url)
    if prefix not in registered(index):
        raise NotFound(f"Storage location {url!r} is not registered; GET /management/v1/locations lists them")
    index.release(owner(prefix))
    with index.engine.begin() as conn:
        conn.execute(delete(store.grants).where(store.grants.c.securable == f"location {prefix}"))
    return prefix


def registered(index: LocationIndex) -> list[str]:
    return index.prefixes_of_kind(LOCATION)
