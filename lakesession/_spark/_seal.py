"""Seal Spark's own network: every JVM lakesession starts stays on loopback, authenticated, with private files.

Iceberg's Spark scans broadcast the table and its FileIO properties — vended ``s3.*`` keys included — from
the driver's BlockManager. Spark's defaults bind that BlockManager and the driver's RPC to the host's
routable address with no authentication (the UI to every interface), so anyone who can open a TCP
connection there fetches the keys with Spark's own block-transfer client (``tests/_blockthief.py``). Loopback
alone does not protect a host shared by several users; ``spark.authenticate`` does. So, unless the user's
own ``spark_conf`` says otherwise (then one warning line names the risk):

* ``spark.authenticate`` is always on. In local mode Spark makes a fresh random secret per start and keeps
  it in the JVM's memory (nothing to pass, nothing to leak). On a cluster the driver needs the cluster's
  secret: it is read from ``spark.authenticate.secret.file`` or ``LAKESESSION_SPARK_SECRET_FILE`` (a file
  only its owner may read) and handed to the JVM through pyspark's authenticated gateway after launch —
  never on a command line (``HIDDEN``); RPC and shuffle/spill files are encrypted there as well.
* Local mode: the driver's RPC, BlockManager and file server on ``127.0.0.1``; the UI too
  (``SPARK_LOCAL_IP`` in the JVM's environment), or off for the engine.
* Spark's local dirs, warehouse, Hadoop and Java temp dirs in a 0700 directory of this process
  (``private_dir``), never the working directory nor a shared ``/tmp`` path others can list.
* ``spark.redaction.regex`` covers every key lakesession sets (catalog tokens, ``s3.*`` keys, the engine's).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError

__all__ = [
    "HIDDEN",
    "LOOPBACK",
    "REDACTION",
    "SECRET_FILE_ENV",
    "Seal",
    "is_local",
    "private_dir",
    "properties_file",
    "seal",
    "tighten",
]

logger = logging.getLogger("lakesession.spark")

LOOPBACK = "127.0.0.1"
SECRET_FILE_ENV = "LAKESESSION_SPARK_SECRET_FILE"
SECRET_KEY = "spark.authenticate.secret"
SECRET_FILE_KEY = "spark.authenticate.secret.file"
#: conf keys set on the JVM's SparkConf through pyspark's gateway, never on the launch command line
HIDDEN = (SECRET_KEY,)
#: Spark's default pattern, plus what lakesession sets: ``s3.access-key-id``, credentials, signing keys
REDACTION = r"(?i:secret|password|token|access[._-]?key|credential|signature|sqlkey)"
_LOCAL = re.compile(r"^local(\[[^\]]*\])?$")
_private: Path | None = None


def is_local(master: str) -> bool:
    """Whether ``master`` runs everything in this JVM (``local``, ``local[4]``, ``local[*, 3]``)."""
    return bool(_LOCAL.match(master.strip()))


def _loopback(host: str) -> bool:
    return host.strip() in ("127.0.0.1", "localhost", "::1", "[::1]") or host.strip().startswith("127.")


def private_dir() -> Path:
    """This process's 0700 directory for Spark's files (removed at exit): others can neither list nor read it."""
    global _private
    if _private is None or not _private.is_dir():
        base = tempfile.mkdtemp(prefix="lakesession-spark-")  # mkdtemp: 0700, owned by this user
        _private = Path(base)
        atexit.register(shutil.rmtree, base, True)
    return _private


def tighten(root: Path | None = None) -> None:
    """Make every directory under ``root`` (default: ``private_dir()``) 0700 and every file 0600.

    Spark creates its ``blockmgr-*``/``spark-*`` folders with the process's umask (0755); the private parent
    already keeps others out, and this makes each of them private as well."""
    top = root if root is not None else _private
    if top is None or not top.is_dir():
        return
    for path in [top, *top.rglob("*")]:
        try:
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                path.chmod(0o700)
            elif stat.S_ISREG(mode):
                path.chmod(0o600)
        except OSError:  # a file Spark removed meanwhile
            continue


def properties_file(props: Mapping[str, str]) -> Path:
    """``props`` as a Spark properties file only this account may read (for ``spark-submit --properties-file``)."""
    fd, name = tempfile.mkstemp(prefix="spark-", suffix=".conf", dir=private_dir())  # mkstemp: 0600
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(f"{key} {value}\n" for key, value in props.items())
    return Path(name)


def _read_secret(path: str) -> str:
    """The cluster's shared secret from ``path``: a file only its owner may read."""
    try:
        info = os.stat(path)
        with open(path, encoding="utf-8") as f:
            secret = f.read().strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the Spark cluster's secret file {path}: {exc.strerror}. Fix: point "
            f"{SECRET_FILE_KEY} (or {SECRET_FILE_ENV}) at the file holding the cluster's spark.authenticate.secret"
        ) from None
    if info.st_mode & 0o077:
        raise ConfigError(
            f"the Spark cluster's secret file {path} is readable by other accounts (mode "
            f"{stat.S_IMODE(info.st_mode):o}). Fix: chmod 600 {path}"
        )
    lines = [line.strip() for line in secret.splitlines()]
    if any(line.startswith("spark.") for line in lines):  # the cluster's properties file (spark-auth.conf)
        pairs = (line.replace("=", " ", 1).partition(" ") for line in lines)
        secret = next((value.strip() for key, _, value in pairs if key == SECRET_KEY), "")
    if not secret:
        raise ConfigError(f"the Spark cluster's secret file {path} holds no secret. Fix: write the secret into it")
    return secret


@dataclass
class Seal:
    """What sealing adds to a launch: ``conf`` (on the command line), ``hidden`` (after launch), ``env``; ``drop``
    names keys to take out of the launch conf."""

    conf: dict[str, str] = field(default_factory=dict)
    drop: set[str] = field(default_factory=set)
    hidden: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:  # the hidden secret stays out of every repr and log
        return f"Seal(conf={sorted(self.conf)}, hidden={sorted(self.hidden)}, env={sorted(self.env)})"

    def apply(self, conf: Mapping[str, str]) -> dict[str, str]:
        """``conf`` sealed: what the JVM launches with (``hidden`` not included)."""
        return {k: v for k, v in {**conf, **self.conf}.items() if k not in self.drop}


def _java_tmp(opts: str, tmp: Path) -> str:
    return opts if "-Djava.io.tmpdir=" in opts else f"{opts} -Djava.io.tmpdir={tmp}".strip()


def seal(
    conf: Mapping[str, str],
    master: str,
    *,
    user_conf: Mapping[str, str] | None = None,
    ui: bool = True,
    environ: Mapping[str, str] | None = None,
) -> Seal:
    """The settings that seal a JVM started with ``conf`` on ``master`` (see the module docstring).

    ``user_conf``: what the user (or the engine's operator) asked for; a key set there wins, with a warning
    when it opens the JVM. ``ui``: whether Spark's UI may run (on loopback); the engine runs none."""
    env = os.environ if environ is None else environ
    asked = dict(user_conf or {})
    out = Seal()
    local = is_local(master)

    def default(key: str, value: str) -> None:
        if key not in conf and key not in asked:
            out.conf[key] = value

    if str(asked.get("spark.authenticate", conf.get("spark.authenticate", "true"))).lower() == "false":
        out.warnings.append(
            "spark.authenticate=false: Spark's RPC and BlockManager answer anyone who connects, and its "
            "broadcasts carry this session's vended storage keys"
        )
    else:
        out.conf["spark.authenticate"] = "true"
        if not local:
            path = asked.get(SECRET_FILE_KEY) or conf.get(SECRET_FILE_KEY) or env.get(SECRET_FILE_ENV)
            if SECRET_KEY in asked or SECRET_KEY in conf:
                out.warnings.append(
                    f"{SECRET_KEY} given as a setting: it is on the JVM's command line, which every account "
                    f"of this host can read (ps). Fix: put it in a 0600 file named by {SECRET_FILE_KEY}"
                )
            elif not path:
                raise ConfigError(
                    f"Spark master {master} needs the cluster's shared secret (spark.authenticate): its "
                    f"executors would otherwise fetch this session's vended keys from anyone. Fix: set "
                    f"{SECRET_FILE_ENV} (or the Spark setting {SECRET_FILE_KEY}) to a 0600 file holding the "
                    "cluster's spark.authenticate.secret (docs: Security model, Spark's own network)"
                )
            else:
                out.hidden[SECRET_KEY] = _read_secret(path)
            out.drop.add(SECRET_FILE_KEY)  # read here; Spark must not look for it on the executors' hosts
            default("spark.network.crypto.enabled", "true")
            default("spark.io.encryption.enabled", "true")
    if local:
        for key in ("spark.driver.host", "spark.driver.bindAddress"):
            value = asked.get(key)
            if value is not None and not _loopback(value):
                out.warnings.append(
                    f"{key}={value}: Spark's driver RPC and BlockManager listen beyond loopback, reachable from "
                    "the network"
                )
            default(key, LOOPBACK)
        local_ip = env.get("SPARK_LOCAL_IP")
        if local_ip and not _loopback(local_ip):
            out.warnings.append(f"SPARK_LOCAL_IP={local_ip}: Spark's UI listens beyond loopback")
        else:
            out.env["SPARK_LOCAL_IP"] = LOOPBACK  # the UI binds SPARK_LOCAL_IP (else every interface)
    if not ui:
        if str(asked.get("spark.ui.enabled", "false")).lower() == "true":
            out.warnings.append("spark.ui.enabled=true: the engine's Spark UI shows every user's queries")
        default("spark.ui.enabled", "false")
    root = private_dir()
    default("spark.local.dir", str(root / "local"))
    default("spark.sql.warehouse.dir", str(root / "warehouse"))
    default("spark.hadoop.hadoop.tmp.dir", str(root / "hadoop"))
    if local:  # a cluster's executors have their own temp dirs (the worker's)
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            out.conf[key] = _java_tmp(conf.get(key, ""), root / "tmp")
        (root / "tmp").mkdir(mode=0o700, exist_ok=True)
    theirs = asked.get("spark.redaction.regex") or conf.get("spark.redaction.regex")
    out.conf["spark.redaction.regex"] = f"(?:{theirs})|(?:{REDACTION})" if theirs else REDACTION
    for line in out.warnings:
        logger.warning("lakesession: %s", line)
    return out
