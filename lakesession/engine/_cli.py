"""``lakesession engine``: run the trusted engine until SIGTERM/SIGINT (then stop it cleanly)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any

from ..errors import LakesessionError


def build_parser(prog: str = "lakesession engine") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run the trusted engine until SIGTERM/SIGINT (then stop it cleanly).",
        allow_abbrev=False,  # --client-secret must not be taken for --client-secret-file
    )
    p.add_argument("--config", help="YAML file of engine options (keys: EngineConfig's fields)")
    p.add_argument("--catalog", help="the catalog's base URI")
    p.add_argument("--warehouse")
    p.add_argument("--client-id", dest="client_id", help="the engine's service principal (client id)")
    p.add_argument(
        "--client-secret-file",
        dest="client_secret_file",
        help="file with the engine's client secret (or LAKESESSION_ENGINE_CLIENT_SECRET; never an argument)",
    )
    p.add_argument("--issuer", help="OIDC issuer of users' tokens (default: the catalog's {catalog}/oidc)")
    p.add_argument("--token-url", dest="token_url", help="token endpoint for the exchange (default: discovery)")
    p.add_argument("--audience", dest="audiences", action="append", help="accepted audience (repeatable)")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 15002; 0 picks one)")
    p.add_argument("--master", help="Spark master (default local[*])")
    p.add_argument("--tls-cert", dest="tls_cert")
    p.add_argument("--tls-key", dest="tls_key")
    p.add_argument(
        "--insecure",
        action="store_const",
        const=True,
        help="serve plaintext on a non-loopback address (only behind a TLS-terminating proxy)",
    )
    p.add_argument("--gateway-host", dest="gateway_host", help="per-user gateways' bind address (clusters)")
    p.add_argument("--gateway-client", dest="gateway_clients", action="append", help="cluster host/CIDR")
    p.add_argument("--jars", help="jar mode: auto, maven, cache, offline")
    p.add_argument("--idle-timeout", dest="idle_timeout", type=float, help="seconds before an idle user is forgotten")
    p.add_argument("--max-users", dest="max_users", type=int, help="users served at once (default 256)")
    p.add_argument(
        "--max-sessions-per-user", dest="max_sessions_per_user", type=int, help="Connect sessions per user (16)"
    )
    p.add_argument("--conf", action="append", default=[], help="extra Spark conf key=value (repeatable)")
    p.add_argument("--print-ready", action="store_true", help="print 'READY sc://host:port' once serving")
    return p


def main(argv: list[str] | None = None, *, prog: str = "lakesession engine") -> int:
    from . import Engine, EngineConfig

    args = build_parser(prog).parse_args(argv)
    given: dict[str, Any] = {
        k: getattr(args, k)
        for k in (
            "catalog",
            "warehouse",
            "client_id",
            "client_secret_file",
            "issuer",
            "token_url",
            "audiences",
            "host",
            "port",
            "master",
            "tls_cert",
            "tls_key",
            "insecure",
            "gateway_host",
            "gateway_clients",
            "jars",
            "idle_timeout",
            "max_users",
            "max_sessions_per_user",
        )
    }
    extra = dict(kv.split("=", 1) for kv in args.conf if "=" in kv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = EngineConfig.resolve(given, args.config)
        if extra:
            config = EngineConfig(**{**config.__dict__, "spark_conf": {**config.spark_conf, **extra}})
        engine = Engine(config).start()
    except LakesessionError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2

    def _stop(signum: int, _frame: Any) -> None:
        logging.getLogger("lakesession.engine").info("signal %d: stopping", signum)
        engine.stop()

    import faulthandler

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: every thread's stack on stderr (operators, tests)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.print_ready:
        print(f"READY {engine.address}", flush=True)
    engine.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
