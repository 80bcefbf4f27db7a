"""Durable catalog state beside pyiceberg's SqlCatalog tables.

One SQLAlchemy database holds everything: pyiceberg's ``iceberg_tables`` and
``iceberg_namespace_properties`` (tables and namespaces) and our own tables for
views, principals, roles, grants and the audit log. SQLite (WAL) embedded, or
any SQLAlchemy URL (e.g. PostgreSQL) for a shared deployment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.pool import StaticPool

from . import migrations, sqlitelock

POOL_SIZE = 10  # connections kept per process (and per serve worker)
POOL_OVERFLOW = 20  # up to 30 under bursts (40 request threads, most of them between queries)

metadata = MetaData()

principals = Table(
    "ls_principals",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("type", String(16), nullable=False),  # "user" | "service"
    Column("client_id", String(255), unique=True, nullable=True),
    Column("secret_hash", String(512), nullable=True),
    Column("created_at", Float, nullable=False),
)

roles = Table(
    "ls_roles",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("created_at", Float, nullable=False),
)

role_members = Table(
    "ls_role_members",
    metadata,
    Column("role", String(255), primary_key=True),
    Column("principal", String(255), primary_key=True),
)

grants = Table(
    "ls_grants",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("role", String(255), nullable=False),
    Column("privilege", String(64), nullable=False),
    Column("securable", String(1000), nullable=False),  # canonical "table sales.orders"
    Column("created_at", Float, nullable=False),
    UniqueConstraint("role", "privilege", "securable", name="uq_ls_grant"),
)

# One row (id 1) whose ``version`` moves in the same transaction as every change to principals, roles,
# memberships and grants: a replica reuses its cached grants while the row is unchanged (``directory.py``).
GRANTS_VERSION_ID = 1
grants_version = Table(
    "ls_grants_version",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("version", BigInteger, nullable=False),
)

views = Table(
    "ls_views",
    metadata,
    Column("catalog_name", String(255), primary_key=True),
    Column("namespace", String(255), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("metadata_location", String(1000), nullable=False),
    Column("metadata_json", Text, nullable=False),
)

table_locations = Table(
    "ls_table_locations",  # metadata file → table location: immutable, so never stale
    metadata,
    Column("metadata_location", String(1000), primary_key=True),
    Column("location", String(1000), nullable=False),
)

# Who owns which storage prefix (``locations.LocationIndex``): one row per prefix, normalised with a
# trailing '/'; byte-order comparison ("C" collation on PostgreSQL) makes "starts with" a range query.
_PREFIX = String(1000).with_variant(String(1000, collation="C"), "postgresql")

locations = Table(
    "ls_locations",
    metadata,
    Column("catalog_name", String(255), primary_key=True),
    Column("prefix", _PREFIX, primary_key=True),
    Column("owner_kind", String(16), nullable=False),  # "table" | "view" | "namespace"
    Column("owner_namespace", String(1000), nullable=False),  # nskeys.key: levels joined with 0x1F
    Column("owner_name", String(255), nullable=False),  # "" for a namespace
    Index("ix_ls_locations_owner", "catalog_name", "owner_kind", "owner_namespace", "owner_name"),
)

audit = Table(
    "ls_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float, nullable=False),
    Column("request_id", String(64), nullable=False),
    Column("principal", String(255), nullable=False),
    Column("action", String(64), nullable=False),
    Column("securable", String(1000), nullable=False),
    Column("decision", String(16), nullable=False),  # "allow" | "deny" | "issued" | "error"
    Column("detail", Text, nullable=True),
    Index("ix_ls_audit_ts", "ts"),
    Index("ix_ls_audit_principal", "principal"),
)


# Outcomes of requests carrying an ``Idempotency-Key`` (``idempotency.py``), per principal: a success row
# is written in the mutation's own transaction; ``body`` NULL means "rebuild the answer from current state".
idempotency = Table(
    "ls_idempotency",
    metadata,
    Column("principal", String(255), primary_key=True),
    Column("key", String(36), primary_key=True),
    Column("request_hash", String(64), nullable=False),  # sha256 of method, path, query and body
    Column("status", Integer, nullable=False),
    Column("body", LargeBinary, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_ls_idempotency_expires", "expires_at"),
)


# The vending cache shared by serve workers and replicas (``vendcache.py``): one row per (principal, table,
# location, mode), keyed by an HMAC of those; ``payload`` is the credential sealed with AES-GCM (NULL while a
# process only holds the claim to issue it).
vended_credentials = Table(
    "ls_vended_credentials",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("owner", String(64), nullable=False),  # HMAC of the principal alone: invalidate one principal's
    Column("payload", LargeBinary, nullable=True),
    Column("issued_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("claimed_until", Float, nullable=False),
)


# Sign-in sessions an external issuer ended (OIDC back-channel logout, ``logout.py``): one row per verified
# logout token (its ``jti``: a replay is a duplicate key). With a ``sid``, every token of that session is
# refused; with only a ``sub``, that subject's tokens issued (``iat``) before ``logged_out_at``.
oidc_logouts = Table(
    "ls_oidc_logouts",
    metadata,
    Column("jti", String(255), primary_key=True),
    Column("iss", String(1000), nullable=False),
    Column("sid", String(255), nullable=True),
    Column("sub", String(255), nullable=True),
    Column("logged_out_at", Float, nullable=False),
    Index("ix_ls_oidc_logouts_sid", "sid"),
    Index("ix_ls_oidc_logouts_sub", "sub"),
)


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path).resolve()}"


def make_engine(url: str) -> Engine:
    """An engine tuned for the embedded case: SQLite in WAL mode, tolerant of brief lock contention."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        if ":memory:" in url or url.rstrip("/") == "sqlite:":
            kwargs["poolclass"] = StaticPool
        else:  # as many as the server's request threads: no connection churn (and PRAGMAs) under load
            kwargs.update(pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)
    else:  # a server database: a pooled connection may have died with a restart or outage; test it on checkout
        kwargs.update(pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW, pool_pre_ping=True)
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):
        # writers queued on a process lock instead of SQLite's sleeping busy handler (sqlitelock's docstring)
        sqlitelock.serialize_writes(engine)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

    migrations.upgrade(engine)  # versioned schema (Alembic); adopts databases made by create_all before
    return engine
