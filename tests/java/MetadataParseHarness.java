import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Partitioning;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SortOrder;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableMetadataParser;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;
import org.apache.iceberg.types.TypeUtil;

/**
 * Iceberg Java's metadata parser as Spark, Trino and Flink run it (tests/security/test_metadata_differential.py):
 * reads metadata JSON file paths from stdin, one per line, and answers one line each, "ok" or "error <message>".
 * One JVM for a whole test run.
 *
 * <p>Parsing alone binds only the default spec and sort order with checks; engines go further when they load
 * a table, so this does too: every schema's id and name indexes (column resolution), every spec's partition
 * type (each transform's result type for its source), the table-wide partition type Spark's metadata columns
 * and partitions table use ({@code Partitioning.partitionType}), every sort order's transforms' result types,
 * and every snapshot ref resolved. A file that fails any of them is one an engine cannot use.
 */
public final class MetadataParseHarness {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String path;
    while ((path = in.readLine()) != null) {
      String answer;
      try {
        String json = new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8);
        TableMetadata metadata = TableMetadataParser.fromJson(json);
        load(metadata);
        answer = "ok";
      } catch (Exception | StackOverflowError e) {
        answer = "error " + e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage());
      }
      System.out.println(answer.replace('\n', ' ').replace('\r', ' '));
      System.out.flush();
    }
  }

  /** What an engine computes from the metadata when it loads the table. */
  private static void load(TableMetadata metadata) {
    for (Schema schema : metadata.schemas()) {
      TypeUtil.indexById(schema.asStruct());
      TypeUtil.indexByName(schema.asStruct());
      schema.highestFieldId();
    }
    for (PartitionSpec spec : metadata.specs()) {
      spec.partitionType();
    }
    for (SortOrder order : metadata.sortOrders()) {
      order.fields().forEach(f -> {
        org.apache.iceberg.types.Type source = order.schema().findType(f.sourceId());
        if (source != null) {
          f.transform().getResultType(source);
        }
      });
    }
    metadata.refs().forEach((name, ref) -> {
      if (metadata.snapshot(ref.snapshotId()) == null) {
        throw new IllegalArgumentException("ref " + name + " names a missing snapshot");
      }
    });
    Table table = new BaseTable(new Static(metadata), "harness");
    Partitioning.partitionType(table);
    table.schema();
    table.spec();
    table.sortOrder();
    table.currentSnapshot();
  }

  /** The parsed metadata as a table's operations (read-only). */
  private static final class Static implements TableOperations {
    private final TableMetadata metadata;

    Static(TableMetadata metadata) {
      this.metadata = metadata;
    }

    @Override
    public TableMetadata current() {
      return metadata;
    }

    @Override
    public TableMetadata refresh() {
      return metadata;
    }

    @Override
    public void commit(TableMetadata base, TableMetadata updated) {
      throw new UnsupportedOperationException("read-only");
    }

    @Override
    public FileIO io() {
      throw new UnsupportedOperationException("no files are read");
    }

    @Override
    public String metadataFileLocation(String fileName) {
      return fileName;
    }

    @Override
    public LocationProvider locationProvider() {
      throw new UnsupportedOperationException("no files are written");
    }
  }
}
