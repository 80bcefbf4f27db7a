package dev.lakesession.jvm;

import java.io.IOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;

/**
 * The key S3A's credentials provider hands out for one bucket, whatever AWS SDK S3A was built on (v2 on
 * Hadoop 3.4: {@link S3ACredentialsProvider}; v1 on Hadoop 3.3, Spark 3.5: {@code S3ACredentialsProviderV1}).
 * S3A asks a provider without a path, one per bucket: this is the bucket's union credential from the
 * session's gateway ({@code /lakesession/bucket-credentials}: keys scoped to every prefix of the session
 * in the bucket; several keys when one session policy cannot hold them all), its first key (requests
 * naming no object); every request naming one gets the key of its prefix from the request check. {@code
 * fs.s3a.bucket.<b>.lakesession.location} (or {@code fs.s3a.lakesession.location}) narrows the bucket to
 * one location's credential instead (optional).
 */
final class S3AKeys {
  private static final Map<String, CredentialCache> CACHES = new ConcurrentHashMap<>();
  /** No prefix of this session in the bucket: a key no store accepts (see {@link #current}). */
  static final Creds NO_GRANT = new Creds("", "lakesession-no-grant", "lakesession-no-grant", null, Long.MAX_VALUE);

  final String bucket;
  final String mode;
  final String location; // the optional narrowing override, else null
  private final BucketCredentials union;
  private final CredentialCache cache; // only with the override

  S3AKeys(String bucket, Configuration conf, String mode) {
    this.bucket = bucket;
    this.mode = mode;
    this.location =
        conf.getTrimmed(
            "fs.s3a.bucket." + bucket + ".lakesession.location", conf.getTrimmed("fs.s3a.lakesession.location"));
    this.union = BucketCredentials.of(conf, bucket, mode);
    if (location != null) {
      Map<String, String> props = BucketCredentials.gatewayProps(conf, bucket);
      GatewayClient gw = union.gateway();
      String min = props.get(CometCredentialProvider.MIN_VALID);
      int minValid = min == null ? CometCredentialProvider.DEFAULT_MIN_VALID : Integer.parseInt(min);
      String key = gw.base() + "|" + BucketCredentials.sha256(props.get(GatewayClient.GATEWAY_TOKEN)) + "|" + bucket + "|" + location + "|" + minValid;
      this.cache = CACHES.computeIfAbsent(key, k -> new CredentialCache(gw, minValid));
    } else {
      this.cache = null;
    }
  }

  /** The mode a filesystem's provider serves ({@code fs.s3a.lakesession.mode}, read by default). */
  static String mode(Configuration conf) {
    return conf.getTrimmed("fs.s3a.lakesession.mode", "read");
  }

  /**
   * The bucket's key now. With no prefix of this session in the bucket: {@link #NO_GRANT}. Older AWS SDKs
   * (Spark 4.0's v2 in iceberg-aws-bundle 1.11.0, and v1) resolve credentials before the request check runs:
   * a placeholder no store accepts lets the check ask the catalog for the request's own path, so a refusal
   * names the path, the principal and the grant; a request the check lets through is signed with the key of
   * its prefix instead.
   */
  Creds current() throws IOException {
    if (cache != null) {
      return cache.get(GatewayClient.normalize(location), mode);
    }
    Creds c = union.answer().creds;
    return c == null ? NO_GRANT : c;
  }

  @Override
  public String toString() {
    return "bucket=" + bucket + ", mode=" + mode + (location != null ? ", location=" + location : "");
  }
}
