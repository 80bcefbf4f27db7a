"""What sealing adds to each JVM lakesession starts (``lakesession._spark._seal``): no JVM here, the decisions only.

The attacks themselves (a second process fetching blocks) are in ``tests/security/test_spark_network.py``.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

import pytest

from lakesession._spark import _seal
from lakesession._spark.session import catalog_conf
from lakesession.errors import ConfigError, JarResolutionError

SECRET = "cluster-secret-0123456789abcdef"


def test_local_mode_is_loopback_authenticated_and_private() -> None:
    sealed = _seal.seal({}, "local[*]", environ={})
    conf = sealed.conf
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert sealed.env == {"SPARK_LOCAL_IP": "127.0.0.1"}  # the UI binds it (else every interface)
    assert sealed.hidden == {}  # local mode: Spark makes its own secret, in memory
    root = _seal.private_dir()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for key in ("spark.local.dir", "spark.sql.warehouse.dir", "spark.hadoop.hadoop.tmp.dir"):
        assert Path(conf[key]).parent == root, key
    assert f"-Djava.io.tmpdir={root / 'tmp'}" in conf["spark.driver.extraJavaOptions"]
    assert "spark.ui.enabled" not in conf  # notebooks keep their UI, on loopback


def test_the_engine_runs_no_ui() -> None:
    assert _seal.seal({}, "local[2]", ui=False, environ={}).conf["spark.ui.enabled"] == "false"


@pytest.mark.parametrize(
    ("asked", "warns"),
    [
        ({"spark.authenticate": "false"}, "spark.authenticate=false"),
        ({"spark.driver.host": "10.1.2.3"}, "spark.driver.host=10.1.2.3"),
        ({"spark.driver.bindAddress": "0.0.0.0"}, "spark.driver.bindAddress=0.0.0.0"),
    ],
)
def test_a_user_who_opens_the_jvm_gets_one_warning_naming_the_risk(
    asked: dict[str, str], warns: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="lakesession.spark"):
        sealed = _seal.seal(asked, "local[*]", user_conf=asked, environ={})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and warns in lines[0], lines
    assert sealed.apply(asked).items() >= asked.items()  # what the user asked for stands


def test_a_routable_spark_local_ip_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="lakesession.spark"):
        sealed = _seal.seal({}, "local[*]", environ={"SPARK_LOCAL_IP": "192.0.2.7"})
    assert "SPARK_LOCAL_IP" not in sealed.env
    assert any("SPARK_LOCAL_IP=192.0.2.7" in r.getMessage() for r in caplog.records)


def test_a_cluster_without_its_secret_is_one_line_naming_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        _seal.seal({}, "spark://10.0.0.1:7077", environ={})
    text = str(info.value)
    assert "\n" not in text and _seal.SECRET_FILE_ENV in text and "spark.authenticate.secret.file" in text


def _secret_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "spark-auth.conf"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    "text",
    [
        SECRET + "\n",
        f"spark.authenticate true\nspark.authenticate.secret {SECRET}\n",
        f"spark.authenticate.secret={SECRET}",
    ],
)
def test_a_cluster_secret_is_read_from_its_file_and_kept_off_the_command_line(tmp_path: Path, text: str) -> None:
    path = _secret_file(tmp_path, text)
    asked = {"spark.authenticate.secret.file": str(path)}
    sealed = _seal.seal(asked, "spark://10.0.0.1:7077", user_conf=asked, environ={})
    assert sealed.hidden == {"spark.authenticate.secret": SECRET}
    launch = sealed.apply(asked)
    assert SECRET not in repr(launch) and SECRET not in repr(sealed)
    assert "spark.authenticate.secret.file" not in launch  # read here: executors must not look for it
    assert launch["spark.network.crypto.enabled"] == launch["spark.io.encryption.enabled"] == "true"
    assert "spark.driver.host" not in launch and "SPARK_LOCAL_IP" not in sealed.env  # a cluster must reach it


def test_the_secret_file_may_come_from_the_environment(tmp_path: Path) -> None:
    path = _secret_file(tmp_path, SECRET)
    sealed = _seal.seal({}, "spark://h:7077", environ={_seal.SECRET_FILE_ENV: str(path)})
    assert sealed.hidden["spark.authenticate.secret"] == SECRET


def test_a_secret_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = _secret_file(tmp_path, SECRET, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        _seal.seal({}, "spark://h:7077", environ={_seal.SECRET_FILE_ENV: str(path)})


def test_a_secret_given_as_a_setting_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    asked = {"spark.authenticate.secret": SECRET}
    with caplog.at_level(logging.WARNING, logger="lakesession.spark"):
        _seal.seal(asked, "spark://h:7077", user_conf=asked, environ={})
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "command line" in text and SECRET not in text


def test_redaction_covers_every_key_lakesession_sets() -> None:
    keys = list(catalog_conf("lake", "http://127.0.0.1:1", "gateway-secret", "wh"))
    secret_keys = [k for k in keys if k.endswith(".token")]
    secret_keys += [
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
        "adls.sas-token.acct.dfs.core.windows.net",
        "gcs.oauth2.token",
        "spark.lakesession.engine.sqlKey",
        "spark.authenticate.secret",
        "spark.hadoop.fs.s3a.bucket.lake.lakesession.secret",
        "client.credentials",
    ]
    pattern = re.compile(_seal.REDACTION)
    assert [k for k in secret_keys if not pattern.search(k)] == []
    harmless = ["spark.sql.catalog.lake.uri", "spark.sql.shuffle.partitions", "s3.endpoint", "spark.app.name"]
    assert [k for k in harmless if pattern.search(k)] == []


def test_the_users_own_redaction_pattern_is_kept() -> None:
    sealed = _seal.seal({}, "local", user_conf={"spark.redaction.regex": "mine"}, environ={})
    assert re.search(sealed.conf["spark.redaction.regex"], "x.mine.y")
    assert re.search(sealed.conf["spark.redaction.regex"], "s3.access-key-id")


def test_tighten_makes_sparks_folders_private(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "local" / "blockmgr-1" / "0a").mkdir(parents=True)
    (root / "local" / "blockmgr-1" / "0a" / "shuffle_0_0_0.data").write_text("rows")
    os.chmod(root / "local" / "blockmgr-1", 0o755)
    _seal.tighten(root)
    for path in root.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path


def test_the_connect_server_is_sealed_too() -> None:
    from lakesession._spark import connect_server
    from lakesession._spark.jars import JarSet

    try:
        cmd = connect_server.server_command(15002, jars=JarSet(jars=(), packages=(), source="explicit"))
    except JarResolutionError:
        pytest.skip("pyspark 3.5 ships no Connect server")
    confs = dict(c.split("=", 1) for c in cmd[cmd.index("--master") + 2 :][1::2])
    assert confs["spark.authenticate"] == "true"
    assert confs["spark.driver.bindAddress"] == confs["spark.driver.host"] == "127.0.0.1"
    assert connect_server.server_env({}, master="local[2]")["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_a_running_spark_without_authentication_is_warned_about_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakesession import _sparkbind

    monkeypatch.setattr(_sparkbind.REGISTRY, "created", None)  # a SparkContext lakesession did not start

    class Conf:
        def get(self, key: str) -> str | None:
            return None  # started by the user, without spark.authenticate

    class Context:
        def getConf(self) -> Conf:
            return Conf()

    saved = _sparkbind._warned_unsealed
    _sparkbind._warned_unsealed = False
    try:
        with caplog.at_level(logging.WARNING, logger="lakesession"):
            _sparkbind._check_running_sealed(Context())
            _sparkbind._check_running_sealed(Context())
    finally:
        _sparkbind._warned_unsealed = saved
    lines = [r.getMessage() for r in caplog.records if "spark.authenticate" in r.getMessage()]
    assert len(lines) == 1 and "vended storage keys" in lines[0]
