"""Spark Connect's errors explained by the classic session's rules, no JVM needed (#42: "Connect error classes").

The chains below are what a Spark 4.1.4 Connect server (``lakesession._spark.connect_server``, Iceberg 1.10's
Spark runtime) sent a lakesession client on 2026-12-03 for three newcomer mistakes — its ``ErrorInfo`` and the
``FetchErrorDetailsResponse`` the client fetched (class hierarchies and messages as sent, frames shortened) —
rebuilt here with pyspark's own protobuf classes. The same mistakes against a live server:
``tests/client/test_connect.py::test_each_newcomer_mistake_through_connect_is_the_classic_sessions_one_line``.
"""

from __future__ import annotations

import json

import pytest
from google.rpc import error_details_pb2  # pyspark[connect]'s (in [dev])
from pyspark.sql.connect.proto import base_pb2  # FetchErrorDetailsResponse: pyspark 4's (3.5's client has none)

from lakesession._spark import _chain
from lakesession._spark.errors import CatalogAccessError, WarehouseError, explain
from lakesession.errors import ConfigError, LakesessionError, StorageAccessError

THROWABLE = ["java.lang.Exception", "java.lang.Throwable", "java.lang.Object"]
FORBIDDEN = [
    "org.apache.iceberg.exceptions.ForbiddenException",
    "org.apache.iceberg.exceptions.RESTException",
    "java.lang.RuntimeException",
    *THROWABLE,
]
REFUSED = "Forbidden: Principal 'nobody' is not authorized for load_table on table shop.orders (TABLE_READ_PROPERTIES required)"
NO_WAREHOUSE = ["org.apache.iceberg.exceptions.NoSuchWarehouseException", "java.lang.RuntimeException", *THROWABLE]
DENIED = "Access Denied (Service: S3, Status Code: 403, Request ID: pSoNwdHpwJaXu6sucn9iST2jNSnjsvWkZT6kuoL24ihH9lAmAiFK) (SDK Attempt Count: 1)"
# an INSERT with read-only keys: the job's abort, the writer's close, Parquet's IOException, the SDK's refusal
WRITE = [
    (["org.apache.spark.SparkException", *THROWABLE], "Job aborted due to stage failure: Task 0 in stage 4.0 failed 1 times", ["org.apache.spark.scheduler.DAGScheduler.$anonfun$abortStage$3"]),
    (["java.io.UncheckedIOException", "java.lang.RuntimeException", *THROWABLE], "Failed to close current writer", ["org.apache.iceberg.io.RollingFileWriter.closeCurrentWriter"]),
    (["java.io.IOException", *THROWABLE], f"software.amazon.awssdk.services.s3.model.AccessDeniedException: {DENIED}", ["org.apache.iceberg.shaded.org.apache.parquet.hadoop.ParquetFileWriter.close", "org.apache.iceberg.aws.s3.S3OutputStream.close"]),
    (["software.amazon.awssdk.services.s3.model.AccessDeniedException", "software.amazon.awssdk.services.s3.model.S3Exception", "software.amazon.awssdk.awscore.exception.AwsServiceException", "java.lang.RuntimeException", *THROWABLE], DENIED, ["software.amazon.awssdk.services.s3.model.AccessDeniedException$BuilderImpl.build"]),
]  # fmt: skip


def _info(classes: list[str]) -> error_details_pb2.ErrorInfo:
    info = error_details_pb2.ErrorInfo(reason=classes[0], domain="org.apache.spark")
    info.metadata["classes"] = json.dumps(classes)
    return info


def _details(chain: list[tuple[list[str], str, list[str]]]) -> base_pb2.FetchErrorDetailsResponse:
    resp = base_pb2.FetchErrorDetailsResponse(root_error_idx=0)
    for i, (classes, message, frames) in enumerate(chain):
        err = resp.errors.add(error_type_hierarchy=classes, message=message)
        for frame in frames:
            cls, _, method = frame.rpartition(".")
            err.stack_trace.add(declaring_class=cls, method_name=method, file_name="x.java", line_number=1)
        if i + 1 < len(chain):
            err.cause_idx = i + 1
    return resp


def test_a_connect_chain_is_read_in_cause_order_with_its_frames() -> None:
    chain = _chain.from_connect(_info(WRITE[0][0]), "Job aborted", _details(WRITE))
    assert [link.name for link in chain.links] == [c[0][0] for c in WRITE]
    assert chain.links[-1].is_a("software.amazon.awssdk.services.s3.model.S3Exception")
    assert (
        chain.text.count("\nCaused by: ") == 3 and "\tat org.apache.iceberg.aws.s3.S3OutputStream.close" in chain.text
    )
    assert chain.origin is None


def test_a_refusal_through_connect_names_table_principal_grant_and_fix() -> None:
    """Before: the catalog's words only ("Forbidden: Principal 'nobody' … (TABLE_READ_PROPERTIES required)")."""
    err = explain(_chain.from_connect(_info(FORBIDDEN), REFUSED, _details([(FORBIDDEN, REFUSED, [])])))
    assert isinstance(err, CatalogAccessError) and isinstance(err, LakesessionError) and err.kind == "forbidden"
    said = str(err)
    assert said.startswith("The catalog refused to load table shop.orders as nobody (HTTP 403)"), said
    assert "Fix: ask the catalog's administrator for TABLE_READ_DATA on table shop.orders" in said, said


def test_a_wrong_warehouse_through_connect_is_the_config_error_python_raises() -> None:
    said = "Unknown warehouse 'lakehouse'; this catalog serves warehouse 'lakesession'"
    err = explain(_chain.from_connect(_info(NO_WAREHOUSE), said, _details([(NO_WAREHOUSE, said, [])])))
    assert isinstance(err, WarehouseError) and isinstance(err, ConfigError)
    assert "'lakehouse'" in str(err) and "check warehouse=" in str(err), str(err)


def test_a_refused_write_through_connect_is_one_storage_error() -> None:
    """Before: pyspark's ``SparkException`` with the job's whole Java trace."""
    err = explain(_chain.from_connect(_info(WRITE[0][0]), "Job aborted", _details(WRITE)))
    assert isinstance(err, StorageAccessError) and err.code == "AccessDenied" and err.operation == "write"
    assert "\n" not in str(err) and "Likely cause: a read-only grant" in str(err), str(err)


def test_without_fetched_details_the_error_info_classes_still_explain_it() -> None:
    """A server that does not enrich errors sends only ``ErrorInfo``'s classes and a message naming the class."""
    err = explain(_chain.from_connect(_info(FORBIDDEN), f"{FORBIDDEN[0]}: {REFUSED}", None))
    assert isinstance(err, CatalogAccessError) and "as nobody" in str(err) and FORBIDDEN[0] not in str(err)


def test_spark_side_errors_answer_pysparks_questions_without_a_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyspark's ``CapturedException.getErrorClass()`` asserts a py4j gateway: in a Connect client (none) asking
    a lakesession error raised from Spark for its condition failed with ``AssertionError`` (main 70ceccd)."""
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_gateway", None)  # as in a Connect client: no py4j JVM in the process
    err = CatalogAccessError("the catalog refused", "forbidden", FORBIDDEN[0])
    assert err.getCondition() is None and err.getErrorClass() is None and err.getSqlState() is None
    assert err.getMessageParameters() is None and err.getQueryContext() == [] and str(err) == "the catalog refused"


def test_the_installed_conversion_takes_pyspark_35s_two_arguments_too() -> None:
    """pyspark 3.5's Connect client calls ``convert_exception(info, message)`` (no error details): the installed
    conversion required a third argument, so every Connect error on a 3.5 client was a ``TypeError`` (70ceccd)."""
    from pyspark.sql.connect.client import core

    from lakesession._spark.errors import install_connect_error_conversion

    install_connect_error_conversion()
    err = core.convert_exception(_info(FORBIDDEN), REFUSED)  # type: ignore[call-arg]  # 3.5's call
    assert isinstance(err, CatalogAccessError) and "as nobody" in str(err), str(err)
    analysis = _info(["org.apache.spark.sql.AnalysisException", *THROWABLE])
    spark_own = core.convert_exception(analysis, "[X] y", None)  # pyspark 4's call; Spark's own error: pyspark's
    assert type(spark_own).__module__.startswith("pyspark.errors"), type(spark_own)
