"""``view_rules.check_metadata`` against Iceberg Java 1.12's verdicts on the same view metadata files.

Each case is a small change to one honest view metadata document and what Iceberg Java's
``ViewMetadataParser`` (then resolving the current version and its schema, as every engine does on load)
says about it. The fast test holds the checker to those verdicts; the slow one asks Java again
(tests/java/ViewParseHarness.java), so a Java release that changes its mind fails here first.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lakesession.reference.errors import BadRequest
from lakesession.reference.metadata_rules import Violation
from lakesession.reference.view_rules import check, check_metadata
from tests._icebergjava import java_parser

BASE: dict[str, Any] = {
    "view-uuid": "fa6506c3-7681-40c8-86dc-e36561f83385",
    "format-version": 1,
    "location": "file:///tmp/v",
    "schemas": [
        {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    ],
    "current-version-id": 1,
    "versions": [
        {
            "version-id": 1,
            "timestamp-ms": 1000,
            "schema-id": 0,
            "summary": {"engine-name": "x"},
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
            "default-namespace": ["ns"],
        }
    ],
    "version-log": [{"timestamp-ms": 1000, "version-id": 1}],
}
VERSION = BASE["versions"][0]
FIELD = BASE["schemas"][0]["fields"][0]


def at(*path: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def append(key: str, item: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc[key].append(copy.deepcopy(item))


def pop(*path: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node.pop(path[-1])

    return change


def two_versions_log_unsorted(doc: dict[str, Any]) -> None:
    doc["versions"].append({**VERSION, "version-id": 2, "timestamp-ms": 5})
    doc["version-log"] = [{"timestamp-ms": 9000, "version-id": 1}, {"timestamp-ms": 5, "version-id": 2}]
    doc["current-version-id"] = 2


MAP_OF_DOUBLES = {
    "type": "map",
    "key-id": 2,
    "key": "string",
    "value-id": 3,
    "value": "double",
    "value-required": False,
}

# case: (change, Iceberg Java refuses the file) — verdicts of iceberg-core 1.12.0
CASES: dict[str, tuple[Callable[[dict[str, Any]], None], bool]] = {
    "honest": (lambda doc: None, False),
    "timestamp-ms 2^64": (at("versions", 0, "timestamp-ms", value=2**64), True),
    "timestamp-ms -1": (at("versions", 0, "timestamp-ms", value=-1), False),
    "timestamp-ms 1.5": (at("versions", 0, "timestamp-ms", value=1.5), True),
    "log timestamp-ms 2^63": (at("version-log", 0, "timestamp-ms", value=2**63), True),
    "log version-id 2^31": (at("version-log", 0, "version-id", value=2**31), True),
    "log names an unknown version": (at("version-log", 0, "version-id", value=7), False),
    "log out of order": (two_versions_log_unsorted, False),
    "initial-default notalong": (at("schemas", 0, "fields", 0, "initial-default", value="notalong"), True),
    "write-default notalong": (at("schemas", 0, "fields", 0, "write-default", value="notalong"), True),
    "double default 0": (lambda d: d["schemas"][0]["fields"][0].update({"type": "double", "write-default": 0}), True),
    "double default 0.0": (
        lambda d: d["schemas"][0]["fields"][0].update({"type": "double", "write-default": 0.0}),
        False,
    ),
    "map<string, double> default with an int": (
        lambda d: d["schemas"][0]["fields"][0].update(
            {"type": MAP_OF_DOUBLES, "initial-default": {"keys": ["a"], "values": [1]}}
        ),
        True,
    ),
    "field id 2^40": (at("schemas", 0, "fields", 0, "id", value=2**40), True),
    "duplicate field ids": (
        lambda d: d["schemas"][0]["fields"].append({**FIELD, "name": "y", "type": "string"}),
        True,
    ),
    "list element-id 2^31": (
        at(
            "schemas",
            0,
            "fields",
            0,
            "type",
            value={"type": "list", "element-id": 2**31, "element": "int", "element-required": False},
        ),
        True,
    ),
    "duplicate schema ids": (append("schemas", BASE["schemas"][0]), True),
    "duplicate version ids": (append("versions", VERSION), True),
    "current version nowhere": (at("current-version-id", value=9), True),
    "current-version-id 2^31": (at("current-version-id", value=2**31), True),
    "current version on an unknown schema": (at("versions", 0, "schema-id", value=5), True),
    "schema-id 2^31": (at("schemas", 0, "schema-id", value=2**31), True),
    "version-id 2^31": (at("versions", 0, "version-id", value=2**31), True),
    "format-version 2": (at("format-version", value=2), True),
    "null byte in default-namespace": (at("versions", 0, "default-namespace", value=["a\x00b"]), True),
    "empty default-namespace": (at("versions", 0, "default-namespace", value=[]), False),
    "no default-namespace": (pop("versions", 0, "default-namespace"), True),
    "no summary": (pop("versions", 0, "summary"), True),
    "summary value an int": (at("versions", 0, "summary", "n", value=3), True),
    "representation without dialect": (pop("versions", 0, "representations", 0, "dialect"), True),
    "representation type SQL": (at("versions", 0, "representations", 0, "type", value="SQL"), False),
    "unknown representation type": (at("versions", 0, "representations", value=[{"type": "substrait"}]), False),
    "no representations": (at("versions", 0, "representations", value=[]), False),
    "property value an int": (at("properties", value={"a": 1}), True),
    "no location": (pop("location"), True),
    "view-uuid not a uuid": (at("view-uuid", value="x"), False),
    "default-catalog null": (at("versions", 0, "default-catalog", value=None), False),
}
# stricter than Java's parser, as Java's builder is: it never adds a version on a schema it does not hold
STRICTER = {"a version on an unknown schema": (append("versions", {**VERSION, "version-id": 2, "schema-id": 5}), False)}


def document(case: str) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    ({**CASES, **STRICTER}[case][0])(doc)
    return doc


@pytest.mark.parametrize("case", CASES)
def test_the_checker_refuses_exactly_what_java_refuses(case: str) -> None:
    java_refuses = CASES[case][1]
    if java_refuses:
        with pytest.raises(Violation):
            check_metadata(document(case))
    else:
        check_metadata(document(case))


def test_a_version_on_an_unknown_schema_is_refused_as_javas_builder_does() -> None:
    with pytest.raises(Violation, match="schema-id 5 of view version 2"):
        check_metadata(document("a version on an unknown schema"))


def test_a_violation_is_a_400_naming_the_field() -> None:
    with pytest.raises(BadRequest) as refused:
        check(json.dumps(document("timestamp-ms 2^64")))
    assert refused.value.status == 400
    assert "timestamp-ms" in str(refused.value) and str(2**64) in str(refused.value)


@pytest.mark.slow
def test_the_verdicts_are_javas(tmp_path: Path) -> None:
    cases = {**CASES, **STRICTER}
    with java_parser("view") as parse:
        verdicts = {}
        for i, case in enumerate(cases):
            path = tmp_path / f"{i}.metadata.json"
            path.write_text(json.dumps(document(case)))
            verdicts[case] = parse(path) is not None
    assert verdicts == {case: refuses for case, (_, refuses) in cases.items()}
