"""The ``lakesession`` command: demo, serve, jars (login and status as they land)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .reference.vending import S3Settings


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "lakesession" / "serve"


def cmd_serve(args: argparse.Namespace) -> int:
    from .reference import BootstrapError, start

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        s3 = _s3_settings(args)
        handle = start(
            args.warehouse,
            host=args.host,
            port=args.port,
            db=args.db,
            data_dir=args.data_dir,
            bootstrap=args.bootstrap,
            issuer_url=args.issuer_url,
            access_token_ttl=args.token_ttl,
            s3_emulator=args.s3_emulator,
            s3=s3,
            credential_ttl=args.credential_ttl,
        )
    except BootstrapError as e:
        print(f"lakesession serve: invalid bootstrap file: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"lakesession serve: cannot listen on {args.host}:{args.port}: {e.strerror}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"lakesession serve: {e}", file=sys.stderr)
        return 2
    print(f"catalog: {handle.uri}", flush=True)
    print(f"issuer: {handle.issuer_uri}", flush=True)
    print(f"warehouse: {handle.settings.warehouse}", flush=True)
    if handle.s3_emulator is not None:
        print(f"s3: {handle.s3_emulator.endpoint}", flush=True)
    print(f"admin credentials: {handle.data_dir / 'admin-credentials'} (client id 'admin')", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        handle.stop()
        print("stopped", flush=True)
    return 0


def _s3_settings(args: argparse.Namespace) -> S3Settings | None:
    """Real S3/STS (or any compatible endpoint): the catalog's own keys come from the AWS default
    chain (environment, profile, instance role) — never from the command line."""
    if not args.s3_role_arn:
        return None
    import boto3

    from .reference.vending import S3Settings

    creds = boto3.Session().get_credentials()
    frozen = creds.get_frozen_credentials() if creds is not None else None
    return S3Settings(
        role_arn=args.s3_role_arn,
        region=args.s3_region,
        endpoint=args.s3_endpoint,
        access_key_id=frozen.access_key if frozen else None,
        secret_access_key=frozen.secret_key if frozen else None,
        session_token=frozen.token if frozen else None,
        path_style=args.s3_endpoint is not None,
        credential_ttl=args.credential_ttl,
    )


def cmd_jars(args: argparse.Namespace) -> int:
    from ._spark.jars import jars_main

    return jars_main(args.rest)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakesession", description="PySpark on Iceberg REST catalogs, as you.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the reference Iceberg REST catalog (with OIDC issuer) standalone")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8181, help="port (default 8181; 0 picks a free one)")
    serve.add_argument("--warehouse", default=None, help="warehouse base URI (default file://DATA_DIR/warehouse)")
    serve.add_argument("--db", default=None, help="SQLAlchemy URL for catalog state (default sqlite in DATA_DIR)")
    serve.add_argument("--data-dir", type=Path, default=None, help=f"state directory (default {_default_data_dir()})")
    serve.add_argument("--bootstrap", type=Path, default=None, help="YAML file of principals, roles and grants")
    serve.add_argument("--issuer-url", default=None, help="trust this external OIDC issuer instead of the embedded one")
    serve.add_argument("--token-ttl", type=int, default=3600, help="access token lifetime in seconds (embedded issuer)")
    serve.add_argument(
        "--s3-emulator",
        action="store_true",
        help="serve an s3:// warehouse from the embedded S3/STS emulator (enforces scoped, expiring credentials)",
    )
    serve.add_argument("--credential-ttl", type=int, default=3600, help="lifetime of vended credentials in seconds")
    serve.add_argument(
        "--s3-role-arn",
        default=None,
        help="vend from real S3/STS: the role to assume (the catalog's own keys: AWS default chain)",
    )
    serve.add_argument("--s3-endpoint", default=None, help="S3/STS endpoint for S3-compatible stores (path-style)")
    serve.add_argument("--s3-region", default="us-east-1", help="S3 region (default us-east-1)")
    serve.set_defaults(func=cmd_serve)

    demo = sub.add_parser(
        "demo", help="the whole path on the embedded default: create, write, read, show accesses", add_help=False
    )
    demo.add_argument("rest", nargs=argparse.REMAINDER)
    demo.set_defaults(func=cmd_demo)

    jars = sub.add_parser(
        "jars", help="resolve Spark's JVM jars (Iceberg runtime, AWS SDK), offline if needed", add_help=False
    )
    jars.add_argument("rest", nargs=argparse.REMAINDER)
    jars.set_defaults(func=cmd_jars)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve" and args.data_dir is None:
        args.data_dir = _default_data_dir()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
