import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Drives Hadoop S3A as Spark's raw {@code s3a://} reads do, wired as lakesession wires a session (its provider,
 * request check and client factory; tests/client/test_s3a_union_jvm.py). Arguments: gateway, secret, bucket,
 * then steps {@code read:<key>}, {@code list:<dir>}, {@code write:<key>}, {@code rename:<from>|<to>}, {@code deny:<key>}, {@code denywrite:<key>};
 * prints one line per step.
 */
public final class S3AUnionHarness {
  public static void main(String[] args) throws Exception {
    String gateway = args[0], secret = args[1], bucket = args[2];
    Configuration conf = new Configuration();
    conf.set("fs.s3a.aws.credentials.provider", "dev.lakesession.jvm.S3ACredentialsProvider");
    conf.set("fs.s3a.audit.execution.interceptors", "dev.lakesession.jvm.GrantCheckInterceptor");
    conf.set("fs.s3a.s3.client.factory.impl", "dev.lakesession.jvm.GatewayS3ClientFactory");
    conf.set("fs.s3a.lakesession.gateway.uri", gateway);
    conf.set("fs.s3a.lakesession.gateway.token", secret);
    conf.set("fs.s3a.lakesession.min-valid-seconds", "60");
    conf.set("fs.s3a.impl.disable.cache", "true");
    conf.set("fs.s3a.attempts.maximum", "1");
    conf.set("fs.s3a.retry.limit", "1");
    try (FileSystem fs = FileSystem.get(URI.create("s3a://" + bucket + "/"), conf)) {
      for (int i = 3; i < args.length; i++) {
        String step = args[i];
        String verb = step.substring(0, step.indexOf(':'));
        String key = step.substring(step.indexOf(':') + 1);
        Path path = new Path("s3a://" + bucket + "/" + key);
        try {
          switch (verb) {
            case "read":
              try (InputStream in = fs.open(path)) {
                ByteArrayOutputStream b = new ByteArrayOutputStream();
                in.transferTo(b);
                System.out.println("read " + key + " " + b.toString(StandardCharsets.UTF_8));
              }
              break;
            case "rename": // key: from|to (S3A copies, then deletes: CopyObject through the request check)
              String[] fromTo = key.split("\\|");
              boolean moved =
                  fs.rename(new Path("s3a://" + bucket + "/" + fromTo[0]), new Path("s3a://" + bucket + "/" + fromTo[1]));
              System.out.println("rename " + key + " " + moved);
              break;
            case "list":
              System.out.println("list " + key + " " + fs.listStatus(path).length);
              break;
            case "write":
            case "denywrite":
              try (OutputStream out = fs.create(path, true)) {
                out.write(("written " + key).getBytes(StandardCharsets.UTF_8));
              }
              System.out.println(verb + " " + key + " ok");
              break;
            default:
              try (InputStream in = fs.open(path)) {
                in.read();
              }
              System.out.println("deny " + key + " READ");
          }
        } catch (Exception e) {
          String msg = String.valueOf(e.getMessage()).replace('\n', ' ');
          System.out.println(verb + " " + key + " FAILED " + e.getClass().getSimpleName() + ": "
              + (msg.length() > 300 ? msg.substring(0, 300) : msg));
        }
      }
    }
  }
}
