import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.iceberg.TableMetadataParser;

/**
 * Iceberg Java's metadata parser as Spark, Trino and Flink run it (tests/security/test_metadata_differential.py):
 * reads metadata JSON file paths from stdin, one per line, and answers one line each, "ok" or "error <message>".
 * One JVM for a whole test run.
 */
public final class MetadataParseHarness {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String path;
    while ((path = in.readLine()) != null) {
      String answer;
      try {
        String json = new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8);
        TableMetadataParser.fromJson(json);
        answer = "ok";
      } catch (Exception | StackOverflowError e) {
        answer = "error " + e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage());
      }
      System.out.println(answer.replace('\n', ' ').replace('\r', ' '));
      System.out.flush();
    }
  }
}
