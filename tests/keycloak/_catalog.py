"""A catalog trusting a real Keycloak realm, for the ``keycloak`` tests: ``lakesession serve --issuer-url <realm>
--principal-claim preferred_username --roles-claim groups``; role ``analysts`` reads ``sales.orders``, role ``etl``
manages content, membership comes from Keycloak's groups in each token."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from tests._keycloak import Keycloak
from tests._serve import Served

POLICY = """\
roles:
  - {name: analysts, members: []}
  - {name: etl, members: []}
grants:
  - {role: analysts, privilege: TABLE_READ_DATA, on: table sales.orders}
  - {role: etl, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "region": ["EU", "US", "EU"]})
VENDED = {"header.X-Iceberg-Access-Delegation": "vended-credentials"}


@contextmanager
def served_by_realm(kc: Keycloak, tmp: Path) -> Iterator[Served]:
    """``lakesession serve`` trusting ``kc``'s realm (principal ``preferred_username``, roles from ``groups``) on
    the S3 emulator, with ``sales.orders`` (3 rows) created by the ``etl`` service principal; stopped on exit."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "policy.yaml").write_text(POLICY)
    args = [
        "--port", "0", "--data-dir", str(tmp / "d"), "--bootstrap", str(tmp / "policy.yaml"),
        "--warehouse", "s3://kc-lake/wh", "--s3-emulator",
        "--issuer-url", kc.issuer, "--principal-claim", "preferred_username", "--roles-claim", "groups",
    ]  # fmt: skip
    with Served(args) as srv:
        srv.data_dir = tmp / "d"  # type: ignore[attr-defined]
        etl = catalog(srv, kc.client_token("etl"), "etl")
        etl.create_namespace("sales")
        schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "region", StringType()))
        etl.create_table(("sales", "orders"), schema).append(ROWS)
        yield srv


def catalog(srv: Served, token: str, who: str) -> RestCatalog:
    """A plain pyiceberg catalog holding ``token`` (a Keycloak access token), asking for vended credentials."""
    return RestCatalog(
        f"kc-{who}-{time.monotonic_ns()}", uri=srv.uri, warehouse=srv.lines["warehouse"], token=token, **VENDED
    )


def read_ids(srv: Served, token: str, who: str) -> list[int]:
    table = catalog(srv, token, who).load_table(("sales", "orders"))
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def audit(data_dir: Path, principal: str) -> list[tuple[str, str, str]]:
    """(action, securable, decision) of ``principal``'s audit records, read from the catalog's database
    (its admin logs in at the embedded issuer, which a catalog trusting Keycloak does not run)."""
    with sqlite3.connect(data_dir / "catalog.db") as db:
        rows = db.execute("SELECT action, securable, decision FROM ls_audit WHERE principal = ?", (principal,))
        return [tuple(r) for r in rows]
