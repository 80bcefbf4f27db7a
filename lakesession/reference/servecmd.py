"""``lakesession serve``: the catalog server's command, owned by the server (the client's CLI delegates).

Flags win over ``LAKESESSION_SERVE__*`` environment variables, which win over the ``--config`` file; every
setting is validated before the socket is bound, and a mistake exits 2 with one line naming its origin.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "lakesession" / "serve"


# serve flag (argparse dest) -> (config key path, flag as typed); flags win over env over the config file
_SERVE_FLAGS = {
    "host": ("host", "--host"),
    "port": ("port", "--port"),
    "base_url": ("base_url", "--base-url"),
    "workers": ("workers", "--workers"),
    "warehouse": ("warehouse", "--warehouse"),
    "db": ("db_url", "--db"),
    "data_dir": ("data_dir", "--data-dir"),
    "bootstrap": ("bootstrap", "--bootstrap"),
    "issuer_url": ("issuer_url", "--issuer-url"),
    "principal_claim": ("principal_claim", "--principal-claim"),
    "roles_claim": ("roles_claim", "--roles-claim"),
    "token_ttl": ("access_token_ttl", "--token-ttl"),
    "s3_emulator": ("s3_emulator", "--s3-emulator"),
    "s3_emulator_port": ("s3_emulator_port", "--s3-emulator-port"),
    "credential_ttl": ("credential_ttl", "--credential-ttl"),
    "s3_role_arn": ("s3.role_arn", "--s3-role-arn"),
    "s3_endpoint": ("s3.endpoint", "--s3-endpoint"),
    "s3_region": ("s3.region", "--s3-region"),
    "s3_web_identity": ("s3.web_identity", "--s3-web-identity"),
    "trusted_proxies": ("trusted_proxies", "--trusted-proxies"),
    "backchannel_logout_clients": ("backchannel_logout_clients", "--backchannel-logout-clients"),
}


def serve(args: argparse.Namespace) -> int:
    """``lakesession serve``: run the catalog until SIGINT/SIGTERM; configuration mistakes exit 2 with one line."""
    from sqlalchemy.exc import SQLAlchemyError

    from . import BootstrapError, start
    from .serveconfig import ConfigError, adls_settings, gcs_settings, resolve, s3_settings
    from .workers import Workers, WorkersError, check_workers, freeze_startup_objects

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    flags = {key: (flag, getattr(args, dest)) for dest, (key, flag) in _SERVE_FLAGS.items()}
    if flags["trusted_proxies"][1] is not None:  # a comma-separated list on the command line
        flags["trusted_proxies"] = (
            "--trusted-proxies",
            [p.strip() for p in args.trusted_proxies.split(",") if p.strip()],
        )
    if flags["backchannel_logout_clients"][1] is not None:
        flags["backchannel_logout_clients"] = (
            "--backchannel-logout-clients",
            [c.strip() for c in args.backchannel_logout_clients.split(",") if c.strip()],
        )
    if flags["bootstrap"][1] is not None:
        flags["bootstrap"] = ("--bootstrap", str(args.bootstrap))
    kwargs: dict[str, Any] = {}
    resolved = None
    workers = None
    try:
        resolved = resolve(args.config, flags=flags)  # everything validated before binding
        kwargs = resolved.start_kwargs
        if (refusal := _refusal(kwargs, resolved)) is not None:
            print(f"lakesession serve: {refusal}", file=sys.stderr)
            return 2
        n_workers = kwargs.pop("workers", 1)
        check_workers(n_workers, kwargs.get("db"))
        s3_config = kwargs.pop("s3_config", None)
        if s3_config is not None and not kwargs["s3_emulator"]:
            kwargs["s3"] = s3_settings(s3_config, kwargs["credential_ttl"] or 3600)
        if (adls_config := kwargs.pop("adls_config", None)) is not None:
            kwargs["adls"] = adls_settings(adls_config, kwargs["credential_ttl"] or 3600)
        if (gcs_config := kwargs.pop("gcs_config", None)) is not None:
            kwargs["gcs"] = gcs_settings(gcs_config, kwargs["credential_ttl"] or 3600)
        if kwargs["data_dir"] is None:
            kwargs["data_dir"] = _default_data_dir()
        kwargs["s3_emulator_persist"] = True  # a served emulator keeps its objects in the data dir across restarts
        handle = start(kwargs.pop("warehouse", None), serve=n_workers == 1, **kwargs)
        if n_workers > 1:
            handle.services.catalog.engine.dispose()  # the workers open their own connections
            workers = Workers(handle.settings, handle.data_dir / "issuer-key.json", handle.sock, n_workers)
            try:
                workers.start(handle.uri)
            except RuntimeError as e:
                workers.stop()
                handle.stop()
                print(f"lakesession serve: {e}", file=sys.stderr)
                return 2
    except (ConfigError, BootstrapError) as e:  # each line ``origin: reason`` (file:line, variable, flag)
        print(str(e), file=sys.stderr)
        return 2
    except WorkersError as e:
        print(f"lakesession serve: invalid configuration: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        extra = " (pip install 'psycopg[binary]>=3.1': the [postgres] extra)" if "psycopg" in str(e) else ""
        print(f"lakesession serve: the database driver is missing: {e}{extra}", file=sys.stderr)
        return 2
    except SQLAlchemyError as e:
        from .serveconfig import mask_password

        detail = mask_password(str(getattr(e, "orig", None) or e)).strip().splitlines()
        print(f"lakesession serve: cannot use the catalog database: {detail[0] if detail else e}", file=sys.stderr)
        return 2
    except OSError as e:
        where = f"{kwargs.get('host')}:{kwargs.get('port')}"
        print(f"lakesession serve: cannot listen on {where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except ValueError as e:  # refused by the server itself (e.g. a trust rule): name the setting's origin
        print(f"lakesession serve: {resolved.explain(str(e)) if resolved else e}", file=sys.stderr)
        return 2
    freeze_startup_objects()
    if (warning := public_url_warning(kwargs["host"], handle.uri)) is not None:
        print(f"lakesession serve: warning: {warning}", file=sys.stderr, flush=True)
    _print_client_settings(handle, workers.pids if workers else None)
    try:
        while not stop.wait(0.5):
            if workers is not None:
                workers.poll()
    finally:
        if workers is not None:
            workers.stop()
        handle.stop()
        print("stopped", flush=True)
    return 0


def _refusal(kwargs: dict[str, Any], resolved: Any) -> str | None:
    """Settings that would start a server doing something else than asked: one line naming the setting."""
    warehouse = kwargs.get("warehouse") or ""
    if kwargs.get("s3_emulator") and not warehouse.startswith("s3://"):
        where = resolved.located.where(("s3_emulator",))
        got = f"the warehouse is {warehouse}" if warehouse else "the default warehouse is file://DATA_DIR/warehouse"
        if where == "--s3-emulator":
            return f"--s3-emulator needs --warehouse s3://BUCKET/PREFIX ({got})"
        return f"{where}: s3_emulator needs an s3:// warehouse (warehouse: s3://BUCKET/PREFIX; {got})"
    base_url = kwargs.get("base_url")
    if base_url is not None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            where = resolved.located.where(("base_url",))
            return (
                f"{where}: base_url {base_url!r} is not an http(s) URL: give the address clients reach this "
                "catalog at, e.g. https://catalog.example.com (behind a proxy) or http://HOST:8181"
            )
    return None


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def public_url_warning(host: str, uri: str) -> str | None:
    """Why clients elsewhere could not use what this catalog advertises, or ``None``.

    The catalog tells clients its own address (the OIDC discovery document, the device login's
    verification URL, the token endpoint) from ``base_url``, never from a request's Host header (which
    any client could forge). Bound to every interface or a LAN address but advertising loopback or a
    wildcard address, a device login from another machine would point at that machine's own loopback.
    Only a warning: ``docker run -p 8181:8181`` used from the same host is reached at loopback, rightly.
    """
    if _is_loopback(host):
        return None
    advertised = urlsplit(uri).hostname or ""
    try:
        wildcard = ipaddress.ip_address(advertised).is_unspecified
    except ValueError:
        wildcard = False
    if not (_is_loopback(advertised) or wildcard):
        return None
    return (
        f"listening on {host} but advertising {uri} (OIDC discovery, device login, token endpoint): clients "
        "on other machines will be sent to their own loopback; set the address they reach this catalog at "
        "with --base-url, LAKESESSION_SERVE__BASE_URL or base_url: in --config (e.g. https://catalog.example.com)"
    )


def _print_client_settings(handle: object, worker_pids: list[int] | None = None) -> None:
    """Exactly what clients pass: the URI, the warehouse NAME they request (not the storage location), the issuer."""
    h: Any = handle
    lines = [
        ("catalog", h.uri),
        ("warehouse", h.warehouse),
        ("issuer", h.issuer_uri),
    ]
    if h.settings.uses_embedded_issuer:
        lines.append(("token endpoint", h.issuer_uri + "/token"))
    lines.append(("storage", h.settings.warehouse))
    if h.s3_emulator is not None:
        lines.append(("s3", h.s3_emulator.endpoint))
    mode = _storage_credentials_mode(h)
    if mode:
        lines.append(("storage credentials", mode))
    vending = _vending_line(h)
    if vending:
        lines.append(("vending", vending))
    if h.bind_url != h.uri:
        lines.append(("listening", h.bind_url))
    if worker_pids:
        lines.append(("workers", f"{len(worker_pids)} processes (pids {', '.join(map(str, worker_pids))})"))
    lines.append(("admin credentials", f"{h.data_dir / 'admin-credentials'} (client id 'admin')"))
    token_url = f"{h.issuer_uri}/token" if h.settings.uses_embedded_issuer else "TOKEN_URL"
    lines.append(
        (
            "pyiceberg",
            f"RestCatalog(NAME, uri={h.uri!r}, warehouse={h.warehouse!r}, credential='ID:SECRET', "
            f"**{{'oauth2-server-uri': {token_url!r}}})",
        )
    )
    lines.append(
        (
            "environment",
            f"LAKESESSION_URI={h.uri} LAKESESSION_WAREHOUSE={h.warehouse} LAKESESSION_ISSUER={h.issuer_uri}",
        )
    )
    # last line (scripts wait for it): the notebook call; device login, or credential='ID:SECRET' for services
    lines.append(("connect", f"lakesession.spark(uri={h.uri!r}, warehouse={h.warehouse!r}, issuer={h.issuer_uri!r})"))
    for key, value in lines:
        print(f"{key}: {value}", flush=True)


def _storage_credentials_mode(h: Any) -> str | None:
    """How the catalog obtains the credentials it vends and uses (no secret in it)."""
    s3 = h.settings.s3
    if s3 is None:
        return None
    if h.s3_emulator is not None:
        return "embedded S3/STS emulator (its own key, in this process)"
    if s3.web_identity is not None:
        return str(s3.web_identity.describe(s3.role_arn))
    where = "the AWS default chain" if s3.access_key_id else "none found in the AWS default chain"
    return f"standing key ({where}); AssumeRole {s3.role_arn} (s3.web_identity needs no key)"


def _vending_line(h: Any) -> str | None:
    """What the catalog vends for its warehouse (printed so operators see the cloud and the scope)."""
    adls, gcs, s3 = h.settings.adls, h.settings.gcs, h.settings.s3
    if s3 is not None:
        return f"S3 STS credentials scoped to each table's prefix (role {s3.role_arn}, {s3.credential_ttl} s)"
    if adls is not None and h.settings.warehouse.startswith(("abfss://", "abfs://")):
        scope = "the table's directory (sr=d)" if adls.sas_scope == "directory" else "the container (sr=c)"
        return f"ADLS SAS tokens on {scope}, signed with account {adls.account_name}'s key ({adls.credential_ttl} s)"
    if gcs is not None and h.settings.warehouse.startswith("gs://"):
        src = type(gcs.token_source).__name__ if gcs.token_source is not None else "DownscopedTokenSource"
        return f"GCS OAuth tokens from {src} ({gcs.credential_ttl} s; remote signing: S3 only)"
    return None


def build_parser(prog: str = "lakesession-catalog") -> argparse.ArgumentParser:
    """The catalog server's flags (``lakesession serve`` and ``lakesession-catalog`` share them)."""
    serve = argparse.ArgumentParser(
        prog=prog,
        description="Run the reference Iceberg REST catalog (with OIDC issuer). "
        "Flags win over LAKESESSION_SERVE__<KEY> environment variables, which win over --config.",
    )
    serve.add_argument("--config", type=Path, default=None, help="YAML file of every server setting (and bootstrap:)")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8181; 0 picks a free one)")
    serve.add_argument(
        "--base-url",
        default=None,
        help="the URL clients reach this catalog at (default http://HOST:PORT): the OIDC issuer and device "
        "login advertise it; set it when binding 0.0.0.0 (a container) or behind a proxy",
    )
    serve.add_argument(
        "--workers", type=int, default=None, help="server processes sharing the port (default 1; >1 needs PostgreSQL)"
    )
    serve.add_argument("--warehouse", default=None, help="warehouse base URI (default file://DATA_DIR/warehouse)")
    serve.add_argument("--db", default=None, help="SQLAlchemy URL for catalog state (default sqlite in DATA_DIR)")
    serve.add_argument(
        "--data-dir", type=Path, default=None, help="state directory (default $XDG_DATA_HOME/lakesession/serve)"
    )
    serve.add_argument("--bootstrap", type=Path, default=None, help="YAML file of principals, roles and grants")
    serve.add_argument("--issuer-url", default=None, help="trust this external OIDC issuer instead of the embedded one")
    serve.add_argument(
        "--principal-claim",
        default=None,
        help="token claim (or dotted path) naming the principal (default sub; Keycloak: preferred_username)",
    )
    serve.add_argument(
        "--roles-claim",
        default=None,
        help="token claim (or dotted path) listing groups that map to catalog roles of the same name (e.g. groups)",
    )
    serve.add_argument(
        "--backchannel-logout-clients",
        default=None,
        help="comma-separated client ids of the external issuer whose back-channel logout tokens end sessions here "
        "(POST /oidc-backchannel-logout; Keycloak: the client's backchannel.logout.url)",
    )
    serve.add_argument("--token-ttl", type=int, default=None, help="access token lifetime in seconds (embedded issuer)")
    serve.add_argument(
        "--s3-emulator",
        action="store_true",
        default=None,
        help="serve an s3:// warehouse from the embedded S3/STS emulator (enforces scoped, expiring credentials)",
    )
    serve.add_argument("--s3-emulator-port", type=int, default=None, help="emulator port (default: any free port)")
    serve.add_argument("--credential-ttl", type=int, default=None, help="lifetime of vended credentials in seconds")
    serve.add_argument(
        "--s3-role-arn",
        default=None,
        help="vend from real S3/STS: the role to assume (the catalog's own keys: AWS default chain)",
    )
    serve.add_argument("--s3-endpoint", default=None, help="S3/STS endpoint for S3-compatible stores (path-style)")
    serve.add_argument("--s3-region", default=None, help="S3 region (default us-east-1)")
    serve.add_argument(
        "--s3-web-identity",
        action="store_true",
        default=None,
        help="no storage key: STS AssumeRoleWithWebIdentity with the catalog's own issuer's tokens",
    )
    serve.add_argument(
        "--trusted-proxies",
        default=None,
        help="comma-separated addresses/networks of reverse proxies whose X-Forwarded-For is believed (default none)",
    )
    return serve


def main(argv: list[str] | None = None, prog: str = "lakesession-catalog") -> int:
    """The ``lakesession-catalog`` console script (and ``lakesession serve``): a container's entry point."""
    return serve(build_parser(prog).parse_args(argv))
