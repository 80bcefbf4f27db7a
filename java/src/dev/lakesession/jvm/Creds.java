package dev.lakesession.jvm;

/** One vended credential and the prefix its session policy covers. toString never shows the secret. */
final class Creds {
  final String prefix;
  final String accessKeyId;
  final String secretAccessKey;
  final String sessionToken;
  final long expiresAtMs;

  Creds(String prefix, String accessKeyId, String secretAccessKey, String sessionToken, long expiresAtMs) {
    this.prefix = prefix;
    this.accessKeyId = accessKeyId;
    this.secretAccessKey = secretAccessKey;
    this.sessionToken = sessionToken;
    this.expiresAtMs = expiresAtMs;
  }

  /** Milliseconds of life left at {@code nowMs}. */
  long leftMs(long nowMs) {
    return expiresAtMs - nowMs;
  }

  /** Whether {@code path} (s3://bucket/key) lies inside this credential's prefix (path-boundary safe). */
  boolean covers(String path) {
    if (prefix.endsWith("/")) {
      return path.startsWith(prefix) || path.equals(prefix.substring(0, prefix.length() - 1));
    }
    return path.equals(prefix) || path.startsWith(prefix + "/");
  }

  @Override
  public String toString() {
    return "Creds{prefix=" + prefix + ", expiresAtMs=" + expiresAtMs + "}";
  }
}
