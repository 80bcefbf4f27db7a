"""pyiceberg tables whose FileIO always uses fresh per-table credentials — or remote signing.

pyiceberg 0.12 builds a table's FileIO once, from the load response, and never
refreshes vended credentials. ``load_table`` therefore does the load itself
(through the RestCatalog's own HTTP session, so auth, headers and the prefix are
the catalog's) with an explicit ``X-Iceberg-Access-Delegation``, records the
vended ``storage-credentials`` in the session's ``CredentialStore``, and builds the
``Table`` with a ``VendedFileIO`` that asks the store for a fresh credential before
every file open. Commits still go through the catalog (``Table.catalog``).

With ``access="remote-signing"`` the catalog vends no credentials; the table reads and
writes through a ``SigningFileIO`` whose every S3 request the catalog signs, authorized
with the session's current token.

pyiceberg internals relied on: ``RestCatalog._session`` (a requests Session with the auth
manager), ``url``/``_split_identifier_for_path``/``_check_endpoint``/``_load_file_io``,
``Endpoints``, ``Capability``, ``TableResponse`` and ``_handle_non_200_response``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog.rest import (
    SNAPSHOT_LOADING_MODE,
    Capability,
    Endpoints,
    TableResponse,
)
from pyiceberg.catalog.rest.auth import AUTH_MANAGER
from pyiceberg.catalog.rest.response import _handle_non_200_response
from pyiceberg.exceptions import BadRequestError, NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.typedef import Identifier
from requests import HTTPError
from typing_extensions import override

from .._settings import check_access
from .._wire.cloudkeys import cloud_of
from .._wire.cloudkeys import refresh_endpoint as cloud_refresh_endpoint
from ..credentials import (
    CredentialsError,
    CredentialStore,
    is_secret_key,
    public_config,
    resolve_endpoint,
)
from ._capabilities import remote_signing_unavailable
from ._pyiceberg import TokenSourceAuthManager

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema

VENDED = "vended-credentials"
SIGNING = "remote-signing"
ACCESS_MODES = (VENDED, SIGNING)


class _CallableSource:
    def __init__(self, token: Callable[[], str]):
        self._token = token

    def token(self) -> str:
        return self._token()

    def __repr__(self) -> str:
        return "_CallableSource(***)"


class SessionTable(Table):
    """A pyiceberg ``Table`` whose ``refresh()`` reloads through ``load_table`` (keeping fresh credentials)."""

    _reload: Callable[[], Table]

    @override
    def refresh(self) -> Table:
        fresh = self._reload()
        self._check_uuid(self.metadata, fresh.metadata)
        self.metadata = fresh.metadata
        self.io = fresh.io
        self.metadata_location = fresh.metadata_location
        self.config = fresh.config
        return self


def table_name(identifier: Identifier) -> str:
    """The store's key for a table: its identifier joined with dots (``ns.table``), or as a JSON list
    (``["a.b", "t"]``) when a part contains '.', so ``("a.b", "t")`` and ``("a", "b", "t")`` never share one."""
    if any("." in p or p.startswith("[") for p in identifier):
        return json.dumps(list(identifier), ensure_ascii=False)
    return ".".join(identifier)


def as_identifier(catalog: RestCatalog, identifier: str | Sequence[str]) -> Identifier:
    """``"ns.table"`` split on dots (pyiceberg's rule), or a tuple/list of levels as given: the way in
    for a namespace level that contains '.' (``("a.b", "c", "t")``)."""
    if isinstance(identifier, str):
        return catalog.identifier_to_tuple(identifier)
    return tuple(identifier)


def _load_response(catalog: RestCatalog, ident: Identifier, access: str) -> TableResponse:
    catalog._check_endpoint(Capability.V1_LOAD_TABLE)
    params = {}
    if (mode := catalog.properties.get(SNAPSHOT_LOADING_MODE)) in {"all", "refs"}:
        params["snapshots"] = mode
    response = catalog._session.get(
        catalog.url(Endpoints.load_table, prefixed=True, **catalog._split_identifier_for_path(ident)),
        params=params,
        headers={"X-Iceberg-Access-Delegation": access},
    )
    try:
        response.raise_for_status()
    except HTTPError as exc:
        _handle_non_200_response(exc, {404: NoSuchTableError})
    return TableResponse.model_validate_json(response.text)


def _refresh_url(catalog: RestCatalog, ident: Identifier, response: TableResponse, catalog_uri: str) -> str:
    """Where the table's credentials come from again: the endpoint the catalog named for it, else the
    spec's loadCredentials route when the catalog's ``/v1/config`` lists it, else the table itself
    (catalogs without ``/credentials``, e.g. SeaweedFS: a reload vends fresh credentials)."""
    endpoint = cloud_refresh_endpoint(response.config) or next(
        (e for c in response.storage_credentials for e in [cloud_refresh_endpoint(c.config)] if e), None
    )
    if endpoint is None:
        path = catalog._split_identifier_for_path(ident)
        offered = Capability.V1_LOAD_CREDENTIALS in getattr(catalog, "_supported_endpoints", ())
        endpoint = catalog.url(Endpoints.load_credentials if offered else Endpoints.load_table, prefixed=True, **path)
    return resolve_endpoint(catalog_uri, endpoint)


def load_table(
    catalog: RestCatalog,
    identifier: str | Sequence[str],
    store: CredentialStore,
    token: Callable[[], str],
    catalog_uri: str,
    *,
    access: str = VENDED,
    mode: str | None = None,
    principal: str | None = None,
) -> Table:
    """Load ``identifier`` as a pyiceberg ``Table`` reading and writing with fresh credentials.

    Args:
        catalog: The session's RestCatalog (acting as the user).
        store: The session's credential store; the table's vended credentials are registered there.
        token: Returns the user's current access token (sent to the refresh endpoint / the signer).
        catalog_uri: The catalog's base URI (what ``client.refresh-credentials-endpoint`` is relative to).
        access: ``vended-credentials`` (default) or ``remote-signing``.
        mode: ``read``/``write`` when the caller knows the privilege (shown in snapshots), else unknown.
        principal: Who acts (named by a ``StorageAccessError`` when the store refuses a read or write).

    Raises ``CapabilityError`` when remote signing is asked of a catalog that does not offer it.
    """
    check_access(access)  # the one rule and message (lakesession._settings)
    ident = as_identifier(catalog, identifier)
    name = table_name(ident)
    try:
        response = _load_response(catalog, ident, access)
    except BadRequestError as exc:  # Polaris: "Unsupported access delegation mode"
        if access != SIGNING:
            raise
        raise remote_signing_unavailable(catalog, catalog_uri, name, str(exc)) from exc
    metadata = response.metadata
    config = dict(response.config)
    catalog_props = {k: v for k, v in catalog.properties.items() if isinstance(v, str)}
    props = {**metadata.properties, **config}
    io: Any
    if access == SIGNING:
        if cloud_of(metadata.location) in ("adls", "gcs"):
            raise CredentialsError(
                f"Remote signing is S3-only: table {name} lives on {metadata.location.split('://')[0]}:// "
                f"({cloud_of(metadata.location).upper()}). Load it with access='vended-credentials' "
                f"(SAS / OAuth tokens, refreshed ahead of expiry).",
                name,
            )
        if str(config.get("s3.remote-signing-enabled", "")).lower() != "true":
            raise remote_signing_unavailable(catalog, catalog_uri, name)
        io_props = {
            **public_config(catalog_props),
            **props,
            AUTH_MANAGER: TokenSourceAuthManager(_CallableSource(token)),
        }
        from ..credentials._fileio import SigningFileIO

        io = SigningFileIO(io_props)
    elif response.storage_credentials or any(is_secret_key(k) for k in config):
        from ..credentials._fileio import VendedFileIO

        store.register(
            name,
            response.storage_credentials,
            config,
            location=metadata.location,
            refresh_url=_refresh_url(catalog, ident, response, catalog_uri),
            token=token,
            mode=mode,
        )
        io = VendedFileIO(
            {**catalog_props, **props}, store=store, table=name, location=metadata.location, principal=principal
        )
    else:  # nothing vended (e.g. a file:// warehouse): pyiceberg's own FileIO
        io = catalog._load_file_io(props, response.metadata_location)
    table = SessionTable(
        identifier=ident,
        metadata=metadata,
        metadata_location=response.metadata_location or "",
        io=io,
        catalog=catalog,
        config=public_config(config),
    )
    table._reload = lambda: load_table(
        catalog, ident, store, token, catalog_uri, access=access, mode=mode, principal=principal
    )
    return table


def create_table(
    catalog: RestCatalog,
    identifier: str | Sequence[str],
    schema: Schema | Any,
    store: CredentialStore,
    token: Callable[[], str],
    catalog_uri: str,
    *,
    access: str = VENDED,
    mode: str | None = None,
    principal: str | None = None,
    **kwargs: Any,
) -> Table:
    """Create ``identifier`` (``kwargs`` as pyiceberg's ``create_table``), then ``load_table`` it."""
    catalog.create_table(as_identifier(catalog, identifier), schema, **kwargs)
    return load_table(catalog, identifier, store, token, catalog_uri, access=access, mode=mode, principal=principal)
