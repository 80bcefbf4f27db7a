"""The engine's rulebook (``lakesession/_wire/engine_rules.json``) is the only copy of its rules (#39).

The front door's constants are read from it, the committed jar carries it byte for byte, the docs' rule
table is its rendering, and neither the Python nor the Java sources spell a rule, a refused Catalyst
name, the refusal's text, the signature trailer or the chain-catalog prefix on their own. No JVM.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from lakesession._wire import enginerules
from lakesession._wire.enginerules import BOOK, PATH
from lakesession.engine import _rewrite, _sandbox
from tests.project.test_docs_links import _gen

ROOT = Path(__file__).resolve().parents[2]
JAR = ROOT / "lakesession" / "engine" / "jvm" / "lakesession-engine.jar"  # the engine's own (java/build.py)
JAVA = ROOT / "java" / "src" / "dev" / "lakesession" / "engine"
RULE_IDS = [r["id"] for r in BOOK["rules"]]


def test_the_jar_carries_the_rulebook_byte_for_byte() -> None:
    with zipfile.ZipFile(JAR) as z:
        assert z.read("dev/lakesession/engine/rules.json") == PATH.read_bytes()


def test_the_front_doors_constants_come_from_the_rulebook() -> None:
    assert _sandbox.RULES == {r["id"]: r["summary"] for r in BOOK["rules"]}
    assert {k: list(v) for k, v in _sandbox._TYPES.items()} == {
        k: [v["rule"], v["what"]] for k, v in BOOK["connect_messages"].items()
    }
    assert list(_sandbox.DEFAULT_SETTABLE) == BOOK["settable_confs"]
    assert list(_sandbox.DEFAULT_PROTECTED_PREFIXES) == BOOK["protected_conf_prefixes"]
    assert list(_sandbox.ALWAYS_PROTECTED_PREFIXES) == BOOK["always_protected_conf_prefixes"]
    assert _sandbox._SECRET_KEY.pattern == BOOK["secret_key_pattern"]
    assert _sandbox._REFLECTION == frozenset(BOOK["reflection_functions"])
    assert _rewrite.SIGNATURE is enginerules.SIGNATURE
    signed = _rewrite.sign("SELECT 1", b"k" * 32)
    assert _rewrite.signature_ok(signed, b"k" * 32) and not _rewrite.signature_ok(signed, b"x" * 32)
    assert str(_sandbox.Refused("settings", "x")).startswith(BOOK["refusal"]["prefix"])
    # no copy of a rule's data left in the sources
    source = (ROOT / "lakesession" / "engine" / "_sandbox.py").read_text()
    assert "spark.connect.PythonUDF" not in source and "spark.sql.shuffle.partitions" not in source


def test_every_rule_a_layer_names_is_in_the_rulebook() -> None:
    python = "\n".join(p.read_text() for p in (ROOT / "lakesession" / "engine").glob("*.py"))
    used = set(re.findall(r'Refused\(\s*"([a-z-]+)"', python))
    java = "\n".join(p.read_text() for p in JAVA.glob("*.java"))
    used |= set(re.findall(r'Rulebook\.rule\("([a-z-]+)"\)', java))
    assert used and used <= set(RULE_IDS), used - set(RULE_IDS)
    reasons = set(re.findall(r'Rulebook\.reason\("([a-z-]+)"\)', java))
    reasons |= {
        e["reason"] for key in ("catalyst_nodes", "catalyst_classes", "catalyst_expressions") for e in BOOK[key]
    }
    assert reasons <= set(BOOK["reasons"]), reasons - set(BOOK["reasons"])


def test_the_java_sources_hold_no_copy_of_the_rulebook() -> None:
    java = "\n".join(p.read_text() for p in JAVA.glob("*.java"))
    for name in ("MapInPandas", "CallMethodViaReflection", "HiveGenericUDTF", "InsertIntoDataSourceDirCommand"):
        assert f'"{name}"' not in java, name
    for text in ("lakesession engine refused ", "LAKESESSION_ENGINE_REFUSED", "lakesession-engine-signature", "42501"):
        assert f'"{text}' not in java, text
    for reason in BOOK["reasons"].values():
        assert reason[:40] not in java, reason


def test_the_chain_catalog_prefix_is_built_in_one_place() -> None:
    spelled = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "lakesession").rglob("*.py")
        if re.search(r'__chain_["{]', p.read_text()) and p.name != "enginerules.py"
    ]
    assert spelled == []
    assert enginerules.chain_prefix("lake") == "lake__chain_"


def test_the_docs_rule_table_is_the_rulebooks_rendering() -> None:
    table = _gen().on_page_markdown("<!-- generated: engine-rules -->")
    lines = table.splitlines()
    assert lines[0] == "| rule | refused, for example | why |"
    assert [re.match(r"\| `([a-z-]+)` \|", line).group(1) for line in lines[2:]] == RULE_IDS  # type: ignore[union-attr]
    assert all(r["examples"] and r["why"] for r in BOOK["rules"])  # view-chain included
    page = (ROOT / "docs" / "explanation" / "security-model.md").read_text()
    assert "<!-- generated: engine-rules -->" in page
    assert "| `user-code` |" not in page  # no hand-written copy beside it


def test_the_front_doors_first_net_sees_identifier_through_comments() -> None:
    """``IDENTIFIER/**/(`` passed the front door's old ``\\bidentifier\\s*\\(`` (#39); the JVM decides anyway."""
    import pytest
    from pyspark.sql.connect.proto import base_pb2

    old = re.compile(r"(?i)\bidentifier\s*\(|\bexecute\s+immediate\b")
    for sql in (
        "SELECT * FROM IDENTIFIER/**/(concat('lake__', 'chain_1.sales.orders'))",
        "SELECT * FROM identifier /* a\nb */ -- c\n ('x')",
        "EXECUTE/**/IMMEDIATE 'SELECT 1'",
    ):
        plan = base_pb2.Plan()
        plan.root.sql.query = sql
        with pytest.raises(_sandbox.Refused) as info:
            _sandbox.check_plan(plan, "lake__chain_")
        assert info.value.rule == "dynamic-sql"
    assert old.search("SELECT * FROM IDENTIFIER/**/(concat('lake__', 'chain_1.sales.orders'))") is None  # the bypass
    assert _sandbox.DYNAMIC_SQL.search("SELECT identifier_col FROM t") is None


def test_the_engines_own_keys_stay_internal_whatever_the_operator_lists() -> None:
    """``spark.lakesession.*`` (the session's user, the signing key) is never settable nor readable by a user,
    even with an operator's allow-list naming it and no protected prefixes configured."""
    user_key = enginerules.SESSION_USER_CONF
    policy = _sandbox.ConfPolicy.of([user_key, "spark.sql.shuffle.partitions"], [])
    assert policy.may_set("spark.sql.shuffle.partitions")
    assert not policy.may_set(user_key) and policy.protected(user_key)
    assert policy.protected("spark.lakesession.engine.sqlKey") and policy.protected("my.Credential.file")


def test_the_front_doors_refusals_carry_the_jvms_error_class() -> None:
    """Both layers' refusals name the same class, error class and SQLSTATE (the rulebook's refusal contract)."""
    import grpc
    from google.rpc import error_details_pb2, status_pb2

    from lakesession.engine._proxy import _status

    status = _status(grpc.StatusCode.PERMISSION_DENIED, "lakesession engine refused x: rule 'settings' (y)", "settings")
    details = dict(status.trailing_metadata)["grpc-status-details-bin"]
    info = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(details).details[0].Unpack(info)
    assert info.metadata["errorClass"] == BOOK["refusal"]["error_class"] == "LAKESESSION_ENGINE_REFUSED"
    assert info.metadata["sqlState"] == BOOK["refusal"]["sql_state"]
    assert info.metadata["classes"] == f'["{BOOK["refusal"]["java_class"]}"]' and info.metadata["rule"] == "settings"
