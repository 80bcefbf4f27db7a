"""``Lake``: one reference catalog as a test module's fixture sees it, the suite's one copy.

Why one: ten modules each wrote their own ``class Lake`` (a handle plus an identity provider, a store, its
key prefixes, a recorder …) with the same few helpers; each now passes what it has, and module-specific
actions (a signer attack, a view commit) are module functions taking the lake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import httpx

from lakesession.reference import ReferenceCatalog

P = "/v1/lakesession"  # the reference catalog's Iceberg REST prefix


@dataclass
class Lake:
    """A catalog (``handle``) and what a module's tests use beside it; every part but the handle optional.

    ``secrets`` (principal → client secret) gives each principal client credentials at the catalog's issuer
    (``ids``) and a lakesession pyiceberg catalog named ``<name>-<who>`` (``catalogs``).
    """

    handle: ReferenceCatalog
    secrets: Mapping[str, str] = field(default_factory=dict)
    name: str = "lake"
    idp: ReferenceCatalog | None = None  # a second catalog standing in for the identity provider handle trusts
    bucket: str = ""  # the store's bucket ``loc``, ``exists`` and ``url`` speak of
    loc: dict[str, str] = field(default_factory=dict)  # table → its key prefix inside ``bucket``
    server: Any = None  # the third-party store beside the catalog (Azurite, fake-gcs-server)
    tokens: Any = None  # the catalog's cloud token source, when a test must see what it minted
    calls: Any = None  # a recorder wrapped around the catalog's app: what reached it

    def __post_init__(self) -> None:
        from lakesession.catalog import rest_catalog
        from lakesession.identity import ClientCredentials

        issuer = f"{self.handle.issuer_uri}/token"
        self.ids = {who: ClientCredentials(issuer, who, s, scope="catalog") for who, s in self.secrets.items()}
        self.catalogs = {
            who: rest_catalog(f"{self.name}-{who}", self.handle.uri, src, warehouse=self.handle.warehouse)
            for who, src in self.ids.items()
        }

    # -- the catalog -------------------------------------------------------------------------------

    def load(self, who: str, name: str, store: Any, **kw: Any) -> Any:
        """``name`` loaded by ``who`` through lakesession's vending path (``access=`` … in ``kw``)."""
        from lakesession.catalog._tables import load_table

        return load_table(self.catalogs[who], name, store, self.ids[who].token, self.handle.uri, **kw)

    def catalog_as(self, who: str) -> Any:
        """lakesession's pyiceberg catalog acting as ``who`` with a token the issuer minted directly."""
        from tests.support import catalog_as

        return catalog_as(self.handle, who)

    def call(
        self, method: str, path: str, who: str = "alice", body: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """An Iceberg REST request (``path`` under the prefix) as ``who``, over real HTTP."""
        h = {"Authorization": f"Bearer {self.handle.admin.token_for(who)}", **(headers or {})}
        return httpx.request(method, f"{self.handle.uri}{P}{path}", headers=h, json=body, timeout=30)

    def create_view(self, namespace: str, body: dict[str, Any]) -> None:
        from tests.support import create_view

        create_view(self.handle, namespace, body)

    def audit(self, since: float, action: str) -> list[Any]:
        return list(self.handle.admin.audit(since=since, action=action))

    # -- the store ---------------------------------------------------------------------------------

    @cached_property
    def s3(self) -> Any:
        """The S3 emulator's administrator (boto3): the ground truth of what the store holds."""
        return self.handle.s3_emulator.client()

    @property
    def endpoint(self) -> str:
        return str(self.handle.s3_emulator.endpoint)

    @property
    def region(self) -> str:
        return str(self.handle.s3_emulator.region)

    def store_client(self, creds: dict[str, str]) -> Any:
        """An S3 client of the emulator holding exactly the vended credentials ``creds``."""
        keys = (creds["s3.access-key-id"], creds["s3.secret-access-key"], creds["s3.session-token"])
        return self.handle.s3_emulator.client(credentials=keys)

    def key(self, table: str, rest: str) -> str:
        """The key of ``rest`` under ``table``'s prefix."""
        return f"{self.loc[table]}/{rest}"

    def url(self, path: str) -> str:
        """The store URL of ``path`` (``/key``) in ``bucket``."""
        return f"{self.endpoint}/{self.bucket}{path}"

    def object_url(self, table: str, rest: str) -> str:
        return self.url(f"/{self.key(table, rest)}")

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=self.bucket, Key=key)
        except ClientError:
            return False
        return True

    @staticmethod
    def vended(store: Any, table: str, key: str) -> str:
        """``key`` of the one credential ``store`` (a ``CredentialStore``) holds for ``table``."""
        (cred,) = store.entry(table).credentials
        return str(cred.config[key])
