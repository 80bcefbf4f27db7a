"""Format v3 written by Spark (Iceberg 1.12 on Spark 4.1; 1.10.2/1.12 on 3.5) through the gateway to the
reference catalog, read back by Spark and by pyiceberg.

Ported from pyiceberg 0.12's own v3 integration tests (``dev/provision.py``'s merge-on-read tables,
``test_reads.py``'s ``test_pyarrow_deletes*``/``test_scan_tag``/``test_scan_branch`` with
``format_version=3``, ``test_inspect_table.py``'s v3 files test), plus row lineage as Spark sees it
(``_row_id`` kept across an UPDATE) and an upgrade of a written v2 table. One shared JVM (``lake``).
"""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

pytestmark = [pytest.mark.slow, pytest.mark.spark]

MOR = "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
ROWS = ", ".join(f"(CAST('2023-03-{i:02d}' AS date), {i}, '{chr(96 + i)}')" for i in range(1, 13))
ALL = list(range(1, 13))


@pytest.fixture(scope="module")
def spark(lake):  # type: ignore[no-untyped-def]
    s = lake.spark()
    s.sql("CREATE NAMESPACE IF NOT EXISTS lake.v3s")
    return s


def numbers(df) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted(r[0] for r in df.collect())


def create_mor(spark: Any, name: str, version: int = 3) -> str:
    ident = f"lake.v3s.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {ident}")
    spark.sql(
        f"CREATE TABLE {ident} (dt date, number integer, letter string) USING iceberg "
        f"TBLPROPERTIES ({MOR}, 'format-version'='{version}')"
    )
    # one data file, as pyiceberg's provisioning has it (a vector per data file: counts below are per table)
    spark.sql(f"INSERT INTO {ident} SELECT /*+ COALESCE(1) */ * FROM VALUES {ROWS} AS v(dt, number, letter)")
    assert spark.sql(f"SELECT * FROM {ident}.data_files").count() == 1
    return ident


def check_row_lineage(metadata: Any) -> None:
    """Every snapshot carries row lineage; next-row-id lies past every row id assigned."""
    assert metadata.format_version == 3
    assert metadata.snapshots and all(s.first_row_id is not None for s in metadata.snapshots)
    assert all(s.added_rows is not None for s in metadata.snapshots)
    assert metadata.next_row_id == max(s.first_row_id + s.added_rows for s in metadata.snapshots)  # type: ignore[operator]


def test_deletion_vectors_tags_and_branches(lake, spark) -> None:  # type: ignore[no-untyped-def]
    """pyiceberg's ``test_positional_mor_deletes_v3`` table and its reads (deletes, filters, limits, refs)."""
    ident = create_mor(spark, "mor_deletes")
    spark.sql(f"ALTER TABLE {ident} CREATE TAG tag_12")
    spark.sql(f"ALTER TABLE {ident} CREATE BRANCH without_5")
    spark.sql(f"DELETE FROM {ident}.branch_without_5 WHERE number = 5")
    spark.sql(f"DELETE FROM {ident} WHERE number = 9")
    assert numbers(spark.sql(f"SELECT number FROM {ident}")) == [n for n in ALL if n != 9]
    formats = {r[0] for r in spark.sql(f"SELECT file_format FROM {ident}.delete_files").collect()}
    assert formats == {"PUFFIN"}  # a deletion vector, not a v2 position-delete file

    table = lake.table("v3s.mor_deletes")
    assert table.format_version == 3
    check_row_lineage(table.metadata)
    assert table.scan().to_arrow()["number"].to_pylist() == [n for n in ALL if n != 9]
    window = And(GreaterThanOrEqual("letter", "e"), LessThan("letter", "k"))
    assert table.scan(row_filter=window).to_arrow()["number"].to_pylist() == [5, 6, 7, 8, 10]
    assert table.scan(row_filter=window, limit=1).to_arrow()["number"].to_pylist() == [5]
    assert table.scan(limit=3).to_arrow()["number"].to_pylist() == [1, 2, 3]
    assert table.scan().to_arrow_batch_reader().read_all()["number"].to_pylist() == [n for n in ALL if n != 9]
    assert table.scan().use_ref("tag_12").to_arrow()["number"].to_pylist() == ALL
    assert table.scan().use_ref("without_5").to_arrow()["number"].to_pylist() == [n for n in ALL if n != 5]
    # pyiceberg's inspect tables agree with Spark's metadata tables
    assert len(table.inspect.delete_files()) == spark.sql(f"SELECT * FROM {ident}.delete_files").count() == 1


def test_double_delete_merges_into_one_vector(lake, spark) -> None:  # type: ignore[no-untyped-def]
    """pyiceberg's ``test_positional_mor_double_deletes_v3``: v3 keeps one vector per data file."""
    ident = create_mor(spark, "mor_double")
    spark.sql(f"DELETE FROM {ident} WHERE number = 9")
    spark.sql(f"DELETE FROM {ident} WHERE letter == 'f'")
    expected = [n for n in ALL if n not in (6, 9)]
    assert numbers(spark.sql(f"SELECT number FROM {ident}")) == expected
    deletes = spark.sql(f"SELECT file_format, record_count FROM {ident}.delete_files").collect()
    assert [tuple(r) for r in deletes] == [("PUFFIN", 2)]  # merged into one vector (v2: two files)
    table = lake.table("v3s.mor_double")
    assert table.scan().to_arrow()["number"].to_pylist() == expected
    window = And(GreaterThanOrEqual("letter", "e"), LessThan("letter", "k"))
    assert table.scan(row_filter=window).to_arrow()["number"].to_pylist() == [5, 7, 8, 10]
    assert table.scan(limit=8).to_arrow()["number"].to_pylist() == [1, 2, 3, 4, 5, 7, 8, 10]


def test_update_and_merge_keep_row_ids(lake, spark) -> None:  # type: ignore[no-untyped-def]
    """Row lineage end to end: ids assigned from the catalog's next-row-id, kept by UPDATE and MERGE (Spark 4)."""
    ident = create_mor(spark, "mor_lineage")
    before = dict(spark.sql(f"SELECT number, _row_id FROM {ident}").collect())  # type: ignore[arg-type]
    assert sorted(before.values()) == list(range(12))  # the table's first 12 ids, from next-row-id 0
    spark.sql(f"UPDATE {ident} SET letter = upper(letter) WHERE number = 3")
    spark.sql("CREATE OR REPLACE TEMP VIEW v3_updates AS SELECT * FROM VALUES (4, 'D'), (13, 'm') AS s(number, letter)")
    spark.sql(f"""
        MERGE INTO {ident} t USING v3_updates s ON t.number = s.number
        WHEN MATCHED THEN UPDATE SET t.letter = s.letter
        WHEN NOT MATCHED THEN INSERT (dt, number, letter) VALUES (CAST('2023-04-01' AS date), s.number, s.letter)
    """)
    after = {
        r[0]: (r[1], r[2], r[3])
        for r in spark.sql(f"SELECT number, _row_id, letter, _last_updated_sequence_number FROM {ident}").collect()
    }
    untouched = [n for n in ALL if n not in (3, 4)]
    assert all(after[n][0] == before[n] for n in untouched)
    if int(spark.version.split(".")[0]) >= 4:  # Iceberg carries lineage through Spark 4's row-level writes
        assert (after[3][0], after[4][0]) == (before[3], before[4]), "UPDATE/MERGE changed a row's _row_id"
    else:  # Spark 3.5 rewrites an updated row as a new row: a fresh id, never a reused one
        assert after[3][0] >= 12 and after[4][0] >= 12
    assert after[3][1] == "C" and after[4][1] == "D" and after[13][1] == "m"
    assert after[13][0] >= 12  # the new row got a fresh id, past the first 12
    assert after[3][2] > after[1][2] and after[4][2] > after[3][2]  # last updated by later commits
    assert spark.sql(f"SELECT file_format FROM {ident}.delete_files").collect()[0][0] == "PUFFIN"
    table = lake.table("v3s.mor_lineage")
    check_row_lineage(table.metadata)
    assert len({v[0] for v in after.values()}) == 13 and all(v[0] < table.metadata.next_row_id for v in after.values())
    got = dict(zip(*table.scan().to_arrow().select(["number", "letter"]).to_pydict().values(), strict=True))
    want = {n: v[1] for n, v in after.items()}
    assert got == want


def test_spark_upgrades_a_written_v2_table(lake, spark) -> None:  # type: ignore[no-untyped-def]
    ident = create_mor(spark, "mor_upgrade", version=2)
    spark.sql(f"DELETE FROM {ident} WHERE number = 1")  # a v2 position-delete file
    assert {r[0] for r in spark.sql(f"SELECT file_format FROM {ident}.delete_files").collect()} == {"PARQUET"}
    spark.sql(f"ALTER TABLE {ident} SET TBLPROPERTIES ('format-version'='3')")
    assert lake.table("v3s.mor_upgrade").format_version == 3
    spark.sql(f"DELETE FROM {ident} WHERE number = 2")
    spark.sql(f"INSERT INTO {ident} VALUES (CAST('2023-04-01' AS date), 13, 'm')")
    expected = [*range(3, 14)]
    assert numbers(spark.sql(f"SELECT number FROM {ident}")) == expected
    table = lake.table("v3s.mor_upgrade")
    assert sorted(table.scan().to_arrow()["number"].to_pylist()) == expected
    # rows written before the upgrade got ids at the first commit after it (their manifest's first-row-id)
    ids = [r[0] for r in spark.sql(f"SELECT _row_id FROM {ident}").collect()]
    assert None not in ids and len(set(ids)) == len(ids) == 11
    assert max(ids) < table.metadata.next_row_id  # type: ignore[operator]
    assert all(s.first_row_id is not None for s in table.metadata.snapshots[-2:])  # the two v3 commits


def test_ctas_at_v3_and_a_default_added_by_pyiceberg(lake, spark) -> None:  # type: ignore[no-untyped-def]
    """CTAS is Iceberg Java's create-through-commit (upgrade-format-version 3 + add-snapshot in one commit);
    a column pyiceberg adds with an initial default reads as that default in Spark for the older rows."""
    from pyiceberg.types import IntegerType

    spark.sql("DROP TABLE IF EXISTS lake.v3s.ctas")
    spark.sql(
        "CREATE TABLE lake.v3s.ctas USING iceberg TBLPROPERTIES ('format-version'='3') "
        "AS SELECT id, CAST(id AS string) AS s FROM range(5)"
    )
    table = lake.table("v3s.ctas")
    assert table.format_version == 3
    check_row_lineage(table.metadata)
    assert table.metadata.next_row_id == 5
    with table.update_schema() as update:
        update.add_column("n", IntegerType(), required=True, default_value=7)
    spark.sql("REFRESH TABLE lake.v3s.ctas")
    assert [tuple(r) for r in spark.sql("SELECT id, n FROM lake.v3s.ctas ORDER BY id").collect()] == [
        (i, 7) for i in range(5)
    ]
