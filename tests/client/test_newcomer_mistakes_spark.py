"""The newcomer's mistakes through Spark, as a script shows them: one line each, the wrong URL within seconds (#42).

One real script (its own JVM, its stderr counted as a terminal shows it) runs the Spark mistakes in sequence
against a reference catalog on the S3 emulator; each failure goes to the ``sys.excepthook`` an uncaught error
meets (what Python calls when a script dies of it), so each is what its own script would print.

Before (main f5012d9, measured in #42): ``SHOW NAMESPACES`` on a closed port blocked 412 s while the gateway
answered the JVM 503 twelve times (Iceberg retries 429/502/503/504), 25 stderr lines ending "usually temporary";
the JVM's ``WARNING: Using incubator modules`` banner came first; a refusal was the catalog's words only
(``TABLE_READ_PROPERTIES required``, no fix); a typo'd table had no "did you mean".
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lakesession.reference import ReferenceCatalog
from tests.client.test_newcomer_mistakes import SECRET, closed_port, expired_token
from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy, vended_catalog

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SCRIPT = textwrap.dedent(
    """
    import sys, time, lakesession
    uri, token_url, closed, expired, reader_secret, nobody_secret, remote = sys.argv[1:8]
    remote = remote or None  # a Spark Connect server's sc:// address: the same mistakes through Connect
    conf = {} if remote else {"spark.ui.enabled": "false"}

    def show(name, run):
        print(f"=== {name}", file=sys.stderr, flush=True)
        t = time.monotonic()
        try:
            run()
        except BaseException:
            sys.excepthook(*sys.exc_info())  # what an uncaught error meets
        else:
            print("NO ERROR", file=sys.stderr)
        print(f"=== took {time.monotonic() - t:.1f}", file=sys.stderr, flush=True)

    def login(who, secret, name, **kw):
        kw.setdefault("warehouse", "lakesession")
        return lakesession.connect(uri=uri, credential=f"{who}:{secret}", token_url=token_url, catalog_name=name,
                                   spark_conf=conf, remote=remote, **kw)

    wrong = lakesession.connect(uri=f"http://127.0.0.1:{closed}", credential="reader:x", spark_conf=conf, remote=remote)
    spark = wrong.spark()  # the JVM starts: nothing has been sent to the catalog yet
    show("wrong URL", lambda: spark.sql("SHOW NAMESPACES IN lake").collect())
    token = lakesession.connect(uri=f"http://127.0.0.1:{closed}", token="t", catalog_name="lake_t", spark_conf=conf, remote=remote)
    show("wrong URL (token)", lambda: token.spark().sql("SHOW NAMESPACES IN lake_t").collect())
    reader = login("reader", reader_secret, "lake_r").spark()
    print("rows", reader.sql("SELECT count(*) FROM lake_r.shop.orders").collect()[0][0], flush=True)
    show("typo'd table", lambda: reader.sql("SELECT * FROM lake_r.shop.ordrs").collect())
    show("read-only write", lambda: reader.sql("INSERT INTO lake_r.shop.orders VALUES (3, 'fig')").collect())
    nobody = login("nobody", nobody_secret, "lake_n").spark()
    show("no grant", lambda: nobody.sql("SELECT * FROM lake_n.shop.orders").collect())
    lost = login("reader", reader_secret, "lake_w", warehouse="lakehouse")
    show("wrong warehouse", lambda: lost.spark().sql("SHOW NAMESPACES IN lake_w").collect())
    late = lakesession.connect(uri=uri, token=expired, warehouse="lakesession", catalog_name="lake_e", spark_conf=conf, remote=remote)
    show("expired login", lambda: late.spark().sql("SHOW NAMESPACES IN lake_e").collect())
    """
)
#: mistake -> what its one line must say
SAYS = {
    "wrong URL": ("IssuerUnreachableError", "http://127.0.0.1:{closed}/v1/oauth/tokens", "uri= (LAKESESSION_URI)"),
    "wrong URL (token)": ("CatalogUnreachableError", "http://127.0.0.1:{closed}", "uri= (LAKESESSION_URI)"),
    "typo'd table": ("CatalogAccessError", "table shop.ordrs as reader", "Did you mean lake_r.shop.orders (granted"),
    "read-only write": ("StorageAccessError", "shop.orders", "TABLE_WRITE_DATA"),
    "no grant": ("CatalogAccessError", "table shop.orders as nobody", "TABLE_READ_DATA on table shop.orders"),
    "wrong warehouse": ("ConfigError", "'lakehouse'", "check warehouse="),
    "expired login": ("LoginRequiredError", "expired", "lakesession.connect(token=...)"),
}


Ran = tuple[dict[str, list[str]], str, int]


def mistakes_run(folder: Path, remote: str = "") -> Ran:
    """The script's stderr, cut per mistake: name -> lines (its last one "=== took <s>"); all of stderr; the port.

    ``remote``: a Spark Connect server's ``sc://`` address (tests/client/test_connect.py), else classic Spark."""
    with make_catalog(shop_policy("nm", others=("nobody",)), bucket="newcomer-spark", data_dir=folder / "cat") as cat:
        etl = vended_catalog(cat, "etl", f"etl:{SECRET['etl']}")
        etl.create_namespace("shop")
        etl.create_table(("shop", "orders"), SCHEMA).append(ROWS)
        return _run(cat, folder, remote)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    return mistakes_run(tmp_path_factory.mktemp("spark-mistakes"))


def _run(cat: ReferenceCatalog, folder: Path, remote: str = "") -> tuple[dict[str, list[str]], str, int]:
    script = folder / "mistakes.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LAKESESSION_", "PYICEBERG_"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    port = closed_port()
    argv = [cat.uri, f"{cat.issuer_uri}/token", str(port), expired_token(), SECRET["reader"], SECRET["nobody"], remote]
    done = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, env=env, timeout=900, cwd=folder
    )
    assert done.returncode == 0 and "rows 2" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
    cut: dict[str, list[str]] = {}
    name = None
    for line in done.stderr.splitlines():
        if line.startswith("=== ") and not line.startswith("=== took"):
            name = line[4:]
            cut[name] = []
        elif name is not None and line.strip():
            cut[name].append(line)
    return cut, done.stderr, port


@pytest.mark.parametrize("mistake", list(SAYS))
def test_each_spark_mistake_is_at_most_three_lines_naming_the_fix(run: Ran, mistake: str) -> None:
    assert_one_line(run, mistake)


def assert_one_line(run: Ran, mistake: str) -> None:
    """``mistake``'s stderr: at most three lines, the first lakesession's naming what ``SAYS`` it must."""
    cut, _, port = run
    *lines, took = cut[mistake]
    shown = "\n".join(lines)
    assert took.startswith("=== took ") and 1 <= len(lines) <= 3, shown
    assert lines[0].startswith("lakesession: ") and "Traceback" not in shown and "\tat " not in shown, shown
    for said in SAYS[mistake]:
        assert said.format(closed=port) in lines[0], shown
    assert "usually temporary" not in shown and "Py4J" not in shown, shown


def test_a_wrong_url_fails_within_seconds_not_minutes(run: Ran) -> None:
    cut, _, _ = run
    for mistake in ("wrong URL", "wrong URL (token)"):
        seconds = float(re.sub(r"^=== took ", "", cut[mistake][-1]))
        assert seconds <= 15, f"{mistake}: {seconds} s (was 412 s)"


def test_no_jvm_banner_on_the_users_stderr(run: Ran) -> None:
    _, stderr, _ = run
    assert "Using incubator modules" not in stderr, stderr[:2000]
    before = stderr.split("=== ", 1)[0].strip()
    assert before == "", before  # the JVM's start said nothing at all
