package dev.lakesession.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Instant;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import software.amazon.awssdk.auth.credentials.AwsCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentialsProvider;
import software.amazon.awssdk.auth.credentials.AwsSessionCredentials;

/**
 * AWS SDK v2 provider for Hadoop S3A ({@code fs.s3a.bucket.<b>.aws.credentials.provider}): the
 * credentials of the one granted location S3A reads in this bucket, from the session's gateway.
 * S3A asks a provider without a path, so the location is {@code fs.s3a.lakesession.location} (per
 * bucket) or else the bucket's only granted location. Caches are shared by the S3A filesystems of
 * one session (key: gateway, hash of the session secret, bucket, location), never across sessions.
 */
public final class S3ACredentialsProvider implements AwsCredentialsProvider, AutoCloseable {
  private static final Map<String, CredentialCache> CACHES = new ConcurrentHashMap<>();

  private final CredentialCache cache;
  private final String bucket;
  private final String mode;
  private volatile String location;

  public S3ACredentialsProvider(URI uri, Configuration conf) {
    this.bucket = uri.getHost();
    Map<String, String> props = new HashMap<>();
    for (String k :
        new String[] {
          GatewayClient.GATEWAY_URI, GatewayClient.GATEWAY_TOKEN, CometCredentialProvider.MIN_VALID
        }) {
      String v = conf.getTrimmed("fs.s3a.bucket." + bucket + "." + k.substring(0), conf.getTrimmed("fs.s3a." + k));
      if (v != null) {
        props.put(k, v);
      }
    }
    this.location = conf.getTrimmed("fs.s3a.bucket." + bucket + ".lakesession.location", conf.getTrimmed("fs.s3a.lakesession.location"));
    this.mode = conf.getTrimmed("fs.s3a.lakesession.mode", "read");
    GatewayClient gw = GatewayClient.fromProperties(props);
    String min = props.get(CometCredentialProvider.MIN_VALID);
    int minValid = min == null ? CometCredentialProvider.DEFAULT_MIN_VALID : Integer.parseInt(min);
    String key = gw.base() + "|" + sha256(props.get(GatewayClient.GATEWAY_TOKEN)) + "|" + bucket + "|" + location + "|" + minValid;
    this.cache = CACHES.computeIfAbsent(key, k -> new CredentialCache(gw, minValid));
  }

  @Override
  public AwsCredentials resolveCredentials() {
    try {
      Creds c = cache.get(location(), mode);
      return AwsSessionCredentials.builder()
          .accessKeyId(c.accessKeyId)
          .secretAccessKey(c.secretAccessKey)
          .sessionToken(c.sessionToken)
          .expirationTime(Instant.ofEpochMilli(c.expiresAtMs))
          .build();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private String location() throws IOException {
    String loc = location;
    if (loc != null) {
      return GatewayClient.normalize(loc);
    }
    List<String> mine =
        cache.gateway().policyLocations().stream()
            .map(GatewayClient::normalize)
            .filter(l -> l.startsWith("s3://" + bucket + "/"))
            .toList();
    if (mine.size() != 1) {
      throw new IOException(
          "lakesession: S3A takes one credential per bucket, and bucket "
              + bucket
              + " has "
              + mine.size()
              + " locations granted to this session "
              + mine
              + ": set fs.s3a.bucket."
              + bucket
              + ".lakesession.location to the one to read");
    }
    location = mine.get(0);
    return location;
  }

  private static String sha256(String s) {
    try {
      byte[] d = MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
      StringBuilder b = new StringBuilder();
      for (int i = 0; i < 8; i++) {
        b.append(String.format("%02x", d[i]));
      }
      return b.toString();
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  @Override
  public void close() {
    // the cache outlives one S3A filesystem: the session's other filesystems share it (closed at JVM exit)
  }

  @Override
  public String toString() {
    return "lakesession S3ACredentialsProvider{bucket=" + bucket + ", location=" + location + "}";
  }
}
