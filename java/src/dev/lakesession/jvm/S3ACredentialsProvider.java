package dev.lakesession.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.time.Instant;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentialsProvider;
import software.amazon.awssdk.auth.credentials.AwsSessionCredentials;

/**
 * AWS SDK v2 provider for Hadoop S3A ({@code fs.s3a.aws.credentials.provider}). S3A asks a provider
 * without a path, one per bucket: this one hands out the bucket's union credential from the
 * session's gateway ({@code /lakesession/bucket-credentials}: keys scoped to every prefix of the
 * session in the bucket: the tables it loaded, the locations granted to the user; several keys when
 * one session policy cannot hold them all). This provider hands out the first key (requests naming
 * no object); every request naming one gets the key of its prefix, and writes the write union's,
 * per request ({@link GrantCheckInterceptor}). {@code
 * fs.s3a.bucket.<b>.lakesession.location} (or {@code fs.s3a.lakesession.location}) narrows the
 * bucket to one location's credential instead (optional).
 */
public final class S3ACredentialsProvider implements AwsCredentialsProvider, AutoCloseable {
  private static final Map<String, CredentialCache> CACHES = new ConcurrentHashMap<>();
  static final AwsCredentials NO_GRANT = AwsBasicCredentials.create("lakesession-no-grant", "lakesession-no-grant");

  private final String bucket;
  private final String mode;
  private final String location; // the optional narrowing override, else null
  private final BucketCredentials union;
  private final CredentialCache cache; // only with the override

  public S3ACredentialsProvider(URI uri, Configuration conf) {
    this(uri.getHost(), conf, conf.getTrimmed("fs.s3a.lakesession.mode", "read"));
  }

  S3ACredentialsProvider(String bucket, Configuration conf, String mode) {
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

  static AwsSessionCredentials toSdk(Creds c) {
    return AwsSessionCredentials.builder()
        .accessKeyId(c.accessKeyId)
        .secretAccessKey(c.secretAccessKey)
        .sessionToken(c.sessionToken)
        .expirationTime(Instant.ofEpochMilli(c.expiresAtMs))
        .build();
  }

  @Override
  public AwsCredentials resolveCredentials() {
    try {
      if (cache != null) {
        return toSdk(cache.get(GatewayClient.normalize(location), mode));
      }
      Creds c = union.answer().creds;
      if (c == null) {
        // No prefix of this session in the bucket. AWS SDKs before ~2.50 (Spark 4.0's, in iceberg-aws-bundle
        // 1.11.0) resolve credentials before GrantCheckInterceptor runs: a placeholder no store accepts lets
        // the check ask the catalog for the request's own path, so a refusal names the path, the principal and
        // the grant; a request the check lets through is signed with the key of its prefix instead.
        return NO_GRANT;
      }
      return toSdk(c);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void close() {
    // the caches outlive one S3A filesystem: the session's other filesystems share them
  }

  @Override
  public String toString() {
    return "lakesession S3ACredentialsProvider{bucket=" + bucket + ", mode=" + mode
        + (location != null ? ", location=" + location : "") + "}";
  }
}
