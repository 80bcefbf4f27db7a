package dev.lakesession.jvm;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.comet.cloud.s3.CometS3AccessMode;
import org.apache.comet.cloud.s3.CometS3CredentialContext;
import org.apache.comet.cloud.s3.CometS3Credentials;
import org.apache.comet.cloud.s3.CometS3LocationScopedCredentialProvider;

/**
 * Comet's S3 credential SPI for lakesession sessions, on both of Comet's paths: the Iceberg native
 * scan (catalog property {@code s3.comet.credential.provider.class}; {@code initialize} gets the
 * table's FileIO bag: gateway {@code uri}, session secret {@code token}) and raw Parquet ({@code
 * fs.s3a.comet.credential.provider.class}; lakesession's {@code fs.s3a.lakesession.gateway.*}).
 * Comet keeps one instance per (class, dispatch key, properties): two sessions on one JVM carry
 * different secrets, so they never share an instance nor its cache.
 */
public final class CometCredentialProvider implements CometS3LocationScopedCredentialProvider {
  /** Seconds a credential must outlive a request: Comet's I/O deadline (30 s) plus a margin. */
  static final String MIN_VALID = "lakesession.min-valid-seconds";

  static final int DEFAULT_MIN_VALID = 40;
  private static final AtomicLong CALLS = new AtomicLong();

  private volatile CredentialCache cache;
  private volatile boolean closed;

  @Override
  public void initialize(Map<String, String> properties) {
    String min = GatewayClient.first(properties, MIN_VALID, "fs.s3a." + MIN_VALID);
    int minValid = min == null ? DEFAULT_MIN_VALID : Integer.parseInt(min);
    cache = new CredentialCache(GatewayClient.fromProperties(properties), minValid);
  }

  @Override
  public CometS3Credentials getCredentialsForPath(CometS3CredentialContext context) throws Exception {
    CALLS.incrementAndGet();
    CredentialCache c = live();
    String mode = context.getMode() == CometS3AccessMode.WRITE ? "write" : "read";
    Creds creds = c.get(location(context.getBucket(), context.getPath()), mode);
    return new CometS3Credentials(
        creds.accessKeyId, creds.secretAccessKey, creds.sessionToken, creds.expiresAtMs);
  }

  /** s3://bucket/key for what Comet passes: a full URL, or a key within {@code bucket}. */
  static String location(String bucket, String path) {
    if (path != null && path.contains("://")) {
      return GatewayClient.normalize(path);
    }
    String key = path == null ? "" : path;
    while (key.startsWith("/")) {
      key = key.substring(1);
    }
    return "s3://" + bucket + "/" + key;
  }

  @Override
  /** The granted prefixes in {@code bucket}, as keys (Comet asks credentials for each on its own). */
  public List<String> getPolicyLocations(String bucket) throws Exception {
    CredentialCache c = live();
    List<String> out = new ArrayList<>();
    String root = "s3://" + bucket + "/";
    for (String loc : c.gateway().policyLocations()) {
      String n = GatewayClient.normalize(loc);
      if (!n.startsWith(root)) {
        continue;
      }
      String key = n.substring(root.length()); // Comet takes keys within the bucket, no slashes around
      while (key.endsWith("/")) {
        key = key.substring(0, key.length() - 1);
      }
      if (!key.isEmpty()) {
        out.add(key);
      }
    }
    return out;
  }

  private CredentialCache live() {
    CredentialCache c = cache;
    if (c == null) {
      throw new IllegalStateException(
          closed
              ? "lakesession credential provider is closed"
              : "lakesession credential provider used before initialize()");
    }
    return c;
  }

  /** How often Comet asked any instance for credentials in this JVM (benchmarks read it). */
  public static long providerCalls() {
    return CALLS.get();
  }

  /** How often any lakesession cache in this JVM asked its gateway. */
  public static long gatewayCalls() {
    return CredentialCache.GATEWAY_CALLS.get();
  }

  @Override
  public void close() {
    closed = true;
    CredentialCache c = cache;
    cache = null;
    if (c != null) {
      c.close();
    }
  }

  @Override
  public String toString() {
    CredentialCache c = cache;
    return "lakesession CometCredentialProvider{" + (c == null ? "closed" : c.gateway()) + "}";
  }
}
