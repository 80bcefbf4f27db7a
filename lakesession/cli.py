"""The ``lakesession`` command: demo, serve, jars (login and status as they land)."""

from __future__ import annotations

import argparse
import sys


def cmd_serve(args: argparse.Namespace) -> int:
    """The catalog server's command, owned by the server (``lakesession.reference.servecmd``); its flags are there."""
    from .embedded import require_catalog_server
    from .errors import CatalogServerMissingError

    try:
        require_catalog_server("`lakesession serve`")
    except CatalogServerMissingError as exc:
        print(f"lakesession serve: {exc}", file=sys.stderr)
        return 2
    from .reference.servecmd import main as serve_main

    return serve_main(args.rest, prog="lakesession serve")


def cmd_jars(args: argparse.Namespace) -> int:
    from ._settings import from_environment
    from ._spark.jars import jars_main

    return jars_main(args.rest, default_clouds=from_environment().get("clouds"))


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main(args.rest)


def cmd_engine(args: argparse.Namespace) -> int:
    """The trusted engine (``lakesession.engine``): Spark Connect acting for authenticated users."""
    try:
        from .engine._cli import main as engine_main
    except ImportError as exc:  # lakesession-engine owns it (the client alone leaves it out), with Spark Connect
        print(
            f"lakesession engine: {exc.name} is missing: the engine needs lakesession-engine "
            "(pip install ./core ./client ./engine from a checkout) or the full distribution with its [engine] "
            "extra (pip install -e '.[engine]')",
            file=sys.stderr,
        )
        return 2

    return engine_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakesession", description="PySpark on Iceberg REST catalogs, as you.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="run the reference Iceberg REST catalog (with OIDC issuer) standalone (the full distribution)",
        add_help=False,
    )
    serve.add_argument("rest", nargs=argparse.REMAINDER)
    serve.set_defaults(func=cmd_serve)

    demo = sub.add_parser(
        "demo", help="the whole path on the embedded default: create, write, read, show accesses", add_help=False
    )
    demo.add_argument("rest", nargs=argparse.REMAINDER)
    demo.set_defaults(func=cmd_demo)

    engine = sub.add_parser(
        "engine",
        help="run the trusted engine: Spark Connect acting for each authenticated user (DEFINER views)",
        add_help=False,
    )
    engine.add_argument("rest", nargs=argparse.REMAINDER)
    engine.set_defaults(func=cmd_engine)

    jars = sub.add_parser(
        "jars", help="resolve Spark's JVM jars (Iceberg runtime, AWS SDK), offline if needed", add_help=False
    )
    jars.add_argument("rest", nargs=argparse.REMAINDER)
    jars.set_defaults(func=cmd_jars)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # each command parses its own flags (``rest``): a leading ``--help`` or ``--port`` is theirs, not ours
    args, unknown = parser.parse_known_args(argv)
    args.rest = [*unknown, *args.rest]
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
