package dev.lakesession.jvm;

import java.io.IOException;
import java.net.URI;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;

/**
 * S3A's request check without an AWS SDK: the SDK v2 interceptor ({@link GrantCheckInterceptor}) and the v1
 * request handler ({@code GrantCheckHandlerV1}, Hadoop 3.3 / Spark 3.5) pull a request's bucket and keys out
 * and map these answers onto their SDK's exceptions and per-request signer.
 */
final class GrantCheck {
  /** The source Spark names on the Hadoop settings it defaults (SparkHadoopUtil). */
  static final String SPARK_DEFAULTS = "Set by Spark to default values";

  private GrantCheck() {}

  /** Whether {@code conf} is a lakesession-wired filesystem's. */
  static boolean wired(Configuration conf) {
    return conf != null && conf.getTrimmed("fs.s3a.lakesession.gateway.uri") != null;
  }

  /**
   * The bucket's union for {@code mode}, once every key is inside it: a key outside is the catalog's to
   * decide, through the gateway's {@code path-credentials} (a refusal: {@link GatewayClient.GatewayException};
   * a grant: the union grew, so the held key is dropped).
   */
  static BucketCredentials union(Configuration conf, String bucket, List<String> keys, String mode) throws IOException {
    BucketCredentials union = BucketCredentials.of(conf, bucket, mode);
    try {
      for (String key : keys) {
        if (key == null || key.isEmpty()) {
          continue; // the bucket itself (a root listing): the store's policy decides
        }
        if (union.held().covers("s3://" + bucket + "/" + key)) {
          continue;
        }
        union.gateway().pathCredentials("s3a://" + bucket + "/" + key, mode, 0); // S3A's spelling in messages
        union.invalidate();
        if (!"read".equals(mode)) {
          BucketCredentials.of(conf, bucket, "read").invalidate();
        }
      }
    } catch (IllegalStateException e) {
      throw new GatewayClient.GatewayException(403, "s3a://" + bucket + "/", e.getMessage());
    }
    return union;
  }

  /** The key covering {@code path} in the union's current answer (its first when {@code path} is null). */
  static Creds keyFor(BucketCredentials union, String path) throws IOException {
    GatewayClient.BucketAnswer a = union.answer();
    Creds c = path == null ? a.creds : a.credsFor(path);
    if (c == null) {
      throw new IllegalStateException("lakesession: no " + union.mode + " credential for bucket " + union.bucket);
    }
    return c;
  }

  /** HTTP status of a refusal as the store would send it. */
  static int status(GatewayClient.GatewayException e) {
    return e.status == 401 ? 401 : 403;
  }

  /**
   * The store's endpoint, path style and region as the catalog vends them with the bucket's credentials
   * ({@code s3.endpoint}, {@code s3.path-style-access}, {@code client.region}), as Iceberg's S3FileIO takes
   * them; null when the filesystem is not wired, the user set {@code fs.s3a.endpoint} (globally or per
   * bucket: S3A has propagated per-bucket options by now) or the catalog names no endpoint (AWS: the SDK
   * finds it from the region). A setting the user made stays theirs: {@code pathStyle}/{@code region} null.
   */
  static Vended vended(Configuration conf, URI uri) throws IOException {
    if (!wired(conf) || userSet(conf, "fs.s3a.endpoint")) {
      return null;
    }
    Map<String, String> client = BucketCredentials.of(conf, uri.getHost(), "read").answer().client;
    String endpoint = client.get("s3.endpoint");
    if (endpoint == null || endpoint.isEmpty()) {
      return null;
    }
    Boolean pathStyle =
        userSet(conf, "fs.s3a.path.style.access")
            ? null
            : Boolean.parseBoolean(client.getOrDefault("s3.path-style-access", "false"));
    String region = userSet(conf, "fs.s3a.endpoint.region") ? null : client.getOrDefault("client.region", client.get("s3.region"));
    return new Vended(endpoint, pathStyle, region);
  }

  /** What {@link #vended} found. */
  static final class Vended {
    final String endpoint;
    final Boolean pathStyle;
    final String region;

    Vended(String endpoint, Boolean pathStyle, String region) {
      this.endpoint = endpoint;
      this.pathStyle = pathStyle;
      this.region = region;
    }
  }

  /**
   * Set by someone, not just Hadoop's core-default.xml (which says path.style.access=false) or Spark 3.5's
   * defaults (which set fs.s3a.endpoint=s3.amazonaws.com when neither it nor a region is set).
   */
  static boolean userSet(Configuration conf, String key) {
    if (conf.getTrimmed(key, "").isEmpty()) {
      return false;
    }
    String[] sources = conf.getPropertySources(key);
    if (sources == null) {
      return true;
    }
    for (String s : sources) {
      if (!s.endsWith("-default.xml") && !SPARK_DEFAULTS.equals(s)) {
        return true;
      }
    }
    return false;
  }
}
