import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.apache.iceberg.view.ViewMetadata;
import org.apache.iceberg.view.ViewMetadataParser;

/**
 * Iceberg Java's view metadata parser as Spark, Trino and Flink run it (tests/security/test_view_differential.py):
 * reads view metadata JSON file paths from stdin, one per line, and answers one line each, "ok" or
 * "error <message>". After ViewMetadataParser.fromJson it resolves the current version and its schema, as every
 * engine does when it loads a view (a file whose current version or schema is missing loads, then fails on use).
 * One JVM for a whole test run.
 */
public final class ViewParseHarness {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String path;
    while ((path = in.readLine()) != null) {
      String answer;
      try {
        String json = new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8);
        ViewMetadata metadata = ViewMetadataParser.fromJson(json);
        metadata.currentVersion();
        metadata.schema();
        answer = "ok";
      } catch (Exception | StackOverflowError e) {
        answer = "error " + e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage());
      }
      System.out.println(answer.replace('\n', ' ').replace('\r', ' '));
      System.out.flush();
    }
  }
}
