"""Entry points: ``connect()`` builds a ``Session`` from settings; ``spark()`` keeps the process's current one.

Apart from ``session.py`` (what a Session is) so that the one-identity-at-a-time rule of the
process — ``lakesession.spark()``, ``%lakesession login`` — lives in one place.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError, UnknownOptionError
from .session import ACCESS_MODES, Session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .identity import TokenSource

__all__ = ["connect", "current_session", "replace_current", "spark"]


SESSION_OPTIONS = (
    "catalog_name",
    "jars",
    "master",
    "remote",
    "gateway_host",
    "spark_conf",
    "gateway_options",
    "assumed_credential_ttl",
    "access",
    "comet",
)
EMBEDDED_OPTIONS = ("data_dir", "storage", "credential_ttl", "access_token_ttl")


def connect(catalog: str | None = None, **options: Any) -> Session:
    """A session on ``catalog`` — or, with nothing configured, on the embedded default.

    Settings come from arguments, then ``LAKESESSION_*`` variables, then the config file or
    pyiceberg's ``~/.pyiceberg.yaml`` (see ``lakesession.config``). Identity options:
    ``token`` (static), ``credential='client_id:secret'`` with ``token_url`` (client credentials),
    or ``issuer`` + ``client_id`` (OIDC discovery; device login without a secret, with
    ``on_prompt`` to show the code); ``identity='none'`` for a catalog without authentication. Spark options:
    ``catalog_name``, ``jars``, ``master``, ``remote``, ``gateway_host``, ``spark_conf``. ``assumed_credential_ttl``:
    seconds to assume vended keys live when the catalog states no expiry (Nessie 0.99), so tables refresh them
    ahead of it. ``access="remote-signing"`` (default ``vended-credentials``): Spark and ``table()`` hold no
    storage credentials, the catalog signs each S3 request (Spark's signer calls go through the gateway, as the user).
    ``comet=True``: Apache DataFusion Comet's native scans and raw ``s3a://`` paths, credentials from the gateway
    (docs/comet.md).
    """
    from .config import merged_settings

    begin_embedded = not options.pop("_defer_embedded", False)  # lakesession.spark(): begun once the JVM is up
    session_opts = {k: options.pop(k) for k in list(options) if k in SESSION_OPTIONS}
    if session_opts.get("access", ACCESS_MODES[0]) not in ACCESS_MODES:  # before anything starts
        raise ConfigError(f"access must be one of {', '.join(ACCESS_MODES)}, not {session_opts['access']!r}")
    embedded_opts = {k: options.pop(k) for k in list(options) if k in EMBEDDED_OPTIONS}
    settings = merged_settings(catalog, options)
    if settings.get("uri") is None:
        if catalog is not None:
            raise ConfigError(f"catalog {catalog!r} has no uri: define it in the config file or pass uri=...")
        from .embedded import start_embedded_async, storage_mode

        storage_mode(embedded_opts.get("storage"))  # a bad value fails here, not in the background
        if options:
            raise UnknownOptionError(
                f"unknown options for the embedded default: {', '.join(sorted(options))}. "
                "Fix: pass uri=... for a remote catalog, or use only data_dir, storage, credential_ttl, access_token_ttl."
            )
        return Session(
            None,
            None,
            pending=start_embedded_async(embedded_opts.pop("data_dir", None), begin=begin_embedded, **embedded_opts),
            **session_opts,
        )
    uri = str(settings.pop("uri")).rstrip("/")
    warehouse = settings.pop("warehouse", None)
    identity = _identity(uri, settings)
    if settings:
        raise UnknownOptionError(
            f"unknown options: {', '.join(sorted(settings))}. Fix: check the spelling (see lakesession.connect's docstring)."
        )
    return Session(uri, identity, warehouse=warehouse, **session_opts)


def _identity(uri: str, settings: dict[str, Any]) -> TokenSource:
    """The token source the settings describe (consumes the identity keys from ``settings``)."""
    from .identity import Anonymous, ClientCredentials, DeviceCode, StaticToken, from_issuer

    token = settings.pop("token", None)
    credential = settings.pop("credential", None)
    token_url = settings.pop("token_url", None)
    issuer = settings.pop("issuer", None)
    client_id = settings.pop("client_id", None)
    client_secret = settings.pop("client_secret", None)
    scope = settings.pop("scope", None)
    on_prompt = settings.pop("on_prompt", None)
    kind = settings.pop("identity", None)
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
            **({"scope": scope} if scope else {}),
            **({"on_prompt": on_prompt} if on_prompt else {}),
        )
        if isinstance(source, DeviceCode):
            source.login()
        return source
    if client_id and client_secret:
        return ClientCredentials(
            token_url or f"{uri}/v1/oauth/tokens", client_id, client_secret, scope=scope or "catalog"
        )
    raise ConfigError(
        "no identity: pass token=..., credential='client_id:secret' (with token_url=...), "
        "or issuer=... with client_id=... (device login); for a catalog without authentication "
        "(local development), identity='none'"
    )


_current: Session | None = None
_current_options: dict[str, Any] = {}
_current_lock = threading.RLock()


def spark(**options: Any) -> SparkSession:
    """``connect(**options).spark()``: a SparkSession acting as you, on the configured or embedded catalog.

    The session stays alive (its gateway serves the JVM) and is what ``current_session()`` returns;
    later calls without options (or with the same ones) reuse it. Different options replace it
    explicitly: the previous session is closed first (its SparkSession no longer reaches the
    catalog, and a Spark lakesession started restarts with the new options).
    """
    global _current_options
    with _current_lock:
        current = _current
        if current is not None and not current.closed and (not options or options == _current_options):
            return current.spark()
        # starts nothing yet (an embedded catalog begins once the JVM is launched): a mistake in the options
        # leaves the current one be
        session = connect(_defer_embedded=True, **options)
        if current is not None:
            current.close()  # first: if lakesession's Spark has no other user it stops, and restarts with the options
        replace_current(session)
        _current_options = dict(options)
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
