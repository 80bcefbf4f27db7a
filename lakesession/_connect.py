"""Entry points: ``connect()`` builds a ``Session`` from settings; ``spark()`` keeps the process's current one.

Apart from ``session.py`` (what a Session is) so that the one-identity-at-a-time rule of the
process — ``lakesession.spark()``, ``%lakesession login`` — lives in one place.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ._settings import Settings
from .errors import ADDRESS_SETTING, ConfigError
from .session import Session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .identity import TokenSource

__all__ = ["connect", "current_session", "replace_current", "spark"]


def connect(
    catalog: str | None = None,
    *,
    uri: str | None = None,
    warehouse: str | None = None,
    token: str | None = None,
    credential: str | None = None,
    token_url: str | None = None,
    issuer: str | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
    scope: str | None = None,
    identity: str | None = None,
    on_prompt: Callable[..., Any] | None = None,
    catalog_name: str | None = None,
    jars: str | list[str] | None = None,
    master: str | None = None,
    remote: str | None = None,
    engine: str | None = None,
    gateway_host: str | None = None,
    gateway_clients: Sequence[str] | None = None,
    spark_conf: Mapping[str, str] | None = None,
    gateway_options: Mapping[str, Any] | None = None,
    assumed_credential_ttl: float | None = None,
    access: Literal["vended-credentials", "remote-signing"] | None = None,
    comet: bool | None = None,
    clouds: str | Sequence[str] | None = None,
    warmups: Sequence[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    storage: Literal["s3-emulator", "file"] | None = None,
    credential_ttl: int | None = None,
    access_token_ttl: int | None = None,
    settings: Settings | None = None,
) -> Session:
    """A session on ``catalog`` — or, with nothing configured, on the embedded default.

    Each setting comes from its argument, else its ``LAKESESSION_*`` variable, else the config file
    or pyiceberg's ``~/.pyiceberg.yaml`` (``lakesession.Settings`` documents every one). Identity:
    ``token`` (static), ``credential='client_id:secret'`` with ``token_url`` (client credentials),
    or ``issuer`` + ``client_id`` (OIDC discovery; device login without a secret, ``on_prompt`` shows
    the code); ``identity='none'`` for a catalog without authentication. Spark: ``catalog_name``,
    ``jars``, ``master``, ``remote``, ``engine`` (the platform's trusted engine, ``sc://…``: queries over DEFINER
    views run there), ``gateway_host``, ``gateway_clients``, ``spark_conf``. ``assumed_credential_ttl``: seconds
    to assume vended keys live when the catalog states no expiry (Nessie 0.99). ``access="remote-signing"``:
    Spark and ``table()`` hold no storage credentials, the catalog signs each S3 request. Embedded
    default only: ``data_dir``, ``storage``, ``credential_ttl``, ``access_token_ttl``. ``comet=True``: Apache
    DataFusion Comet's native scans and raw ``s3a://`` paths, credentials from the gateway (docs: Comet).
    ``clouds``: Iceberg's Azure/GCP bundles for Spark (``["adls"]``, ``"gcs"``, ``"all"``) when the warehouse does
    not say so itself (docs: Spark's JVM jars).
    ``warmups``: the start-up warm-ups to run (``["classcache", "catalog", "embedded"]``, the default, or fewer).

    ``settings``: a ``lakesession.Settings`` (say, a platform's shared one) taken as arguments: each keyword
    argument passed here overrides its field, and the environment and config file fill what neither sets,
    as always. ``Settings`` checks its values when built, so a wrong one fails before anything starts.
    """
    given = {k: v for k, v in locals().items() if k not in ("catalog", "settings")}
    return connect_with(Settings.resolve(catalog, arguments(settings, given)), catalog=catalog)


def arguments(settings: Settings | None, given: Mapping[str, Any]) -> dict[str, Any]:
    """``settings``' own fields, overridden by the keyword arguments given (non-None): what ``resolve`` takes."""
    explicit = {k: v for k, v in given.items() if v is not None}
    return {**(settings.explicit if settings is not None else {}), **explicit}


def connect_with(settings: Settings, *, catalog: str | None = None, begin_embedded: bool = True) -> Session:
    """The session ``settings`` describe (``connect()`` after resolving; ``spark()`` defers the embedded start)."""
    session_opts = settings.session_options()
    if settings.uri is None:
        if catalog is not None:
            raise ConfigError(f"catalog {catalog!r} has no uri: define it in the config file or pass uri=...")
        from .embedded import start_embedded_async

        given = settings.given or frozenset()
        remote_only = [n for n in REMOTE_ONLY if n in given]  # variables meant for a catalog stay unused
        if remote_only:
            raise ConfigError(
                f"{', '.join(remote_only)} need a catalog: pass uri=... (or LAKESESSION_URI) for a remote catalog; "
                "the embedded default logs in its demo user by itself"
            )
        data_dir = None if settings.data_dir is None else Path(settings.data_dir)
        pending = start_embedded_async(data_dir, begin=begin_embedded, **settings.embedded_options())
        return Session(None, None, pending=pending, **session_opts)
    # given only: the variables of the embedded default (LAKESESSION_HOME, ...) stay unused with a catalog
    embedded_only = [n for n in EMBEDDED_ONLY if n in (settings.given or ()) and getattr(settings, n) is not None]
    if embedded_only:
        raise ConfigError(f"{', '.join(embedded_only)} apply to the embedded default only: drop them, or drop uri=...")
    uri = str(settings.uri).rstrip("/")
    return Session(uri, _identity(uri, settings), warehouse=settings.warehouse, **session_opts)


REMOTE_ONLY = ("warehouse", "token", "credential", "token_url", "issuer", "client_id", "client_secret", "scope")
EMBEDDED_ONLY = ("data_dir", "storage", "credential_ttl", "access_token_ttl")


def _identity(uri: str, settings: Settings) -> TokenSource:
    """The token source the settings describe."""
    from .identity import Anonymous, ClientCredentials, DeviceCode, StaticToken, from_issuer

    token = settings.token
    credential = settings.credential
    token_url = settings.token_url
    issuer = settings.issuer
    client_id = settings.client_id
    client_secret = settings.client_secret
    scope = settings.scope
    on_prompt = settings.on_prompt
    kind = settings.identity
    if str(kind or "").strip().lower() == "none":  # a catalog without authentication: said explicitly
        given = [k for k, v in (("token", token), ("credential", credential), ("issuer", issuer)) if v]
        if given:
            raise ConfigError(f"identity='none' sends no login, but {', '.join(given)} was given too: drop one of them")
        return Anonymous()
    if token:
        return StaticToken(token)
    if not credential and not client_secret:  # a hub-spawned server: LAKESESSION_IDENTITY=jupyterhub
        from .hub import identity_from_env

        hub = identity_from_env(kind, issuer=issuer)
        if hub is not None:
            return hub
    if credential:
        client_id, _, client_secret = str(credential).partition(":")
    if issuer:
        flow: Literal["client_credentials", "device"] = "client_credentials" if client_secret else "device"
        source = from_issuer(
            issuer,
            client_id=client_id or "lakesession-cli",
            client_secret=client_secret,
            flow=flow,
            **_present(scope=scope, on_prompt=on_prompt),
        )
        if isinstance(source, DeviceCode):
            source.login()
        return source
    if client_id and client_secret:
        source = ClientCredentials(
            token_url or f"{uri}/v1/oauth/tokens", client_id, client_secret, scope=scope or "catalog"
        )
        if not token_url:  # the catalog's own endpoint: a wrong uri= is what to check
            source.address_setting = ADDRESS_SETTING
        return source
    raise ConfigError(
        "no identity: pass token=..., credential='client_id:secret' (with token_url=...), "
        "or issuer=... with client_id=... (device login); for a catalog without authentication "
        "(local development), identity='none'"
    )


def _present(**kw: Any) -> dict[str, Any]:
    """The keyword arguments that were given (so the callee's own defaults apply to the rest)."""
    return {k: v for k, v in kw.items() if v}


_current: Session | None = None
_current_options: dict[str, Any] = {}
_current_lock = threading.RLock()


def spark(
    catalog: str | None = None,
    *,
    uri: str | None = None,
    warehouse: str | None = None,
    token: str | None = None,
    credential: str | None = None,
    token_url: str | None = None,
    issuer: str | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
    scope: str | None = None,
    identity: str | None = None,
    on_prompt: Callable[..., Any] | None = None,
    catalog_name: str | None = None,
    jars: str | list[str] | None = None,
    master: str | None = None,
    remote: str | None = None,
    engine: str | None = None,
    gateway_host: str | None = None,
    gateway_clients: Sequence[str] | None = None,
    spark_conf: Mapping[str, str] | None = None,
    gateway_options: Mapping[str, Any] | None = None,
    assumed_credential_ttl: float | None = None,
    access: Literal["vended-credentials", "remote-signing"] | None = None,
    comet: bool | None = None,
    clouds: str | Sequence[str] | None = None,
    warmups: Sequence[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    storage: Literal["s3-emulator", "file"] | None = None,
    credential_ttl: int | None = None,
    access_token_ttl: int | None = None,
    settings: Settings | None = None,
) -> SparkSession:
    """``connect(...).spark()``: a SparkSession acting as you, on the configured or embedded catalog.

    Takes exactly ``connect()``'s parameters (``settings=`` too: keyword arguments override its fields). The session stays alive (its gateway serves the JVM) and
    is what ``current_session()`` returns; later calls without arguments (or with the same ones) reuse
    it. Different arguments replace it explicitly: the previous session is closed first (its
    SparkSession no longer reaches the catalog, and a Spark lakesession started restarts with them).
    """
    global _current_options
    options = {k: v for k, v in locals().items() if v is not None}
    with _current_lock:
        current = _current
        if current is not None and not current.closed and (not options or options == _current_options):
            return current.spark()
        # starts nothing yet (an embedded catalog begins once the JVM is launched): a mistake in the options, or
        # an install without pyspark, leaves the current one be
        from ._spark._plan import require_pyspark

        require_pyspark("lakesession.spark()")
        given = {k: v for k, v in options.items() if k not in ("catalog", "settings")}
        session = connect_with(
            Settings.resolve(catalog, arguments(settings, given)), catalog=catalog, begin_embedded=False
        )
        if current is not None:
            current.close()  # first: if lakesession's Spark has no other user it stops, and restarts with the options
        replace_current(session)
        _current_options = options
        assert _current is not None
        return _current.spark()


def current_session() -> Session | None:
    """The session behind the last ``lakesession.spark()`` or ``%lakesession login``, if any."""
    return _current


def replace_current(session: Session) -> None:
    """Make ``session`` the process's current one, closing the one it replaces (one identity at a time).

    ``%lakesession login`` as another user goes through here: the previous current session stops
    serving Spark, so nothing obtained from it keeps acting as the previous user.
    """
    global _current, _current_options
    with _current_lock:
        previous, _current = _current, session
        _current_options = {}
        if previous is not None and previous is not session:
            previous.close()
