package dev.lakesession.jvm;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;

/**
 * One bucket's union keys for Hadoop S3A (which takes one credentials provider per bucket), per mode:
 * the gateway's {@code bucket-credentials} answer (one key, or several when one session policy cannot hold
 * the union: each prefix's entry names its key), held while it has {@code minValidSeconds} of
 * life left (refreshed once a quarter of its usable life is left) and dropped when the union grows
 * ({@link #invalidate}). Shared by the S3A filesystems, client factories and request checks of one
 * session (key: gateway, hash of the session secret, bucket, mode), never across sessions.
 */
final class BucketCredentials {
  private static final Map<String, BucketCredentials> ALL = new ConcurrentHashMap<>();

  private final GatewayClient gateway;
  final String bucket;
  final String mode;
  private final int minValidSeconds;
  private volatile GatewayClient.BucketAnswer answer;
  private volatile long fetchedAtMs;

  private BucketCredentials(GatewayClient gateway, String bucket, String mode, int minValidSeconds) {
    this.gateway = gateway;
    this.bucket = bucket;
    this.mode = mode;
    this.minValidSeconds = minValidSeconds;
  }

  /** The session's gateway settings as a Hadoop conf carries them (per bucket first, then global). */
  static Map<String, String> gatewayProps(Configuration conf, String bucket) {
    Map<String, String> props = new HashMap<>();
    for (String k :
        new String[] {
          GatewayClient.GATEWAY_URI, GatewayClient.GATEWAY_TOKEN, CometCredentialProvider.MIN_VALID
        }) {
      String v = conf.getTrimmed("fs.s3a.bucket." + bucket + "." + k, conf.getTrimmed("fs.s3a." + k));
      if (v != null) {
        props.put(k, v);
      }
    }
    return props;
  }

  static BucketCredentials of(Configuration conf, String bucket, String mode) {
    Map<String, String> props = gatewayProps(conf, bucket);
    GatewayClient gw = GatewayClient.fromProperties(props);
    String min = props.get(CometCredentialProvider.MIN_VALID);
    int minValid = min == null ? CometCredentialProvider.DEFAULT_MIN_VALID : Integer.parseInt(min);
    String key = gw.base() + "|" + sha256(props.get(GatewayClient.GATEWAY_TOKEN)) + "|" + bucket + "|" + mode + "|" + minValid;
    BucketCredentials found = ALL.get(key);
    if (found != null) {
      gw.close();
      return found;
    }
    return ALL.computeIfAbsent(key, k -> new BucketCredentials(gw, bucket, mode, minValid));
  }

  GatewayClient gateway() {
    return gateway;
  }

  /** The current answer: fetched when none is held, the held one has too little life left, or the union grew. */
  GatewayClient.BucketAnswer answer() throws IOException {
    GatewayClient.BucketAnswer a = answer;
    long now = System.currentTimeMillis();
    if (a != null && fresh(a, now)) {
      return a;
    }
    synchronized (this) {
      a = answer;
      if (a != null && fresh(a, System.currentTimeMillis())) {
        return a;
      }
      CredentialCache.GATEWAY_CALLS.incrementAndGet();
      a = gateway.bucketCredentials(bucket, mode, minValidSeconds);
      fetchedAtMs = System.currentTimeMillis();
      answer = a;
      return a;
    }
  }

  /** The prefixes held now (no gateway call when an answer is held). */
  GatewayClient.BucketAnswer held() throws IOException {
    GatewayClient.BucketAnswer a = answer;
    return a != null ? a : answer();
  }

  private boolean fresh(GatewayClient.BucketAnswer a, long now) {
    if (a.creds == null) {
      return now - fetchedAtMs < 5_000; // no grant in this bucket: ask again soon (a table may be loaded)
    }
    long minValidMs = minValidSeconds * 1000L;
    long expires = a.expiresAtMs(); // several keys (a large union): the earliest decides
    long usable = Math.max(expires - fetchedAtMs - minValidMs, 0);
    return expires - now >= minValidMs + usable / 4;
  }

  /** The union grew (a path outside it was granted): the next request fetches the new union's key. */
  void invalidate() {
    synchronized (this) {
      answer = null;
    }
  }

  static String sha256(String s) {
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
}
