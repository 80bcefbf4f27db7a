"""The ``lakesession`` command: demo, serve, jars (login and status as they land)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_serve(args: argparse.Namespace) -> int:
    """The catalog server's command: in the full distribution only (``lakesession.reference.servecmd``)."""
    from .embedded import require_catalog_server
    from .errors import CatalogServerMissingError

    try:
        require_catalog_server("`lakesession serve`")
    except CatalogServerMissingError as exc:
        print(f"lakesession serve: {exc}", file=sys.stderr)
        return 2
    from .reference.servecmd import serve

    return serve(args)


def cmd_jars(args: argparse.Namespace) -> int:
    from ._spark.jars import jars_main

    return jars_main(args.rest)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakesession", description="PySpark on Iceberg REST catalogs, as you.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="run the reference Iceberg REST catalog (with OIDC issuer) standalone",
        description="Flags win over LAKESESSION_SERVE__<KEY> environment variables, which win over --config.",
    )
    serve.add_argument("--config", type=Path, default=None, help="YAML file of every server setting (and bootstrap:)")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8181; 0 picks a free one)")
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
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
