package dev.lakesession.jvm;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Asks the session's loopback gateway (never the catalog, never with the user's token) for
 * path-scoped storage credentials, authenticated by the per-session secret.
 */
final class GatewayClient implements AutoCloseable {
  static final String GATEWAY_URI = "lakesession.gateway.uri";
  static final String GATEWAY_TOKEN = "lakesession.gateway.token";
  private static final Duration TIMEOUT = Duration.ofSeconds(30);

  private final String base;
  private final String secret;
  private final String refreshEndpoint;
  private final HttpClient http;

  GatewayClient(String base, String secret, String refreshEndpoint) {
    this.base = base;
    this.secret = secret;
    this.refreshEndpoint = refreshEndpoint;
    this.http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
  }

  /**
   * The client for a property bag: the Iceberg FileIO bag ({@code uri}, {@code token},
   * {@code client.refresh-credentials-endpoint}) or lakesession's own keys (also under an
   * {@code fs.s3a.} prefix, as Hadoop confs carry them).
   */
  static GatewayClient fromProperties(Map<String, String> props) {
    String uri = first(props, GATEWAY_URI, "fs.s3a." + GATEWAY_URI, "uri");
    String token = first(props, GATEWAY_TOKEN, "fs.s3a." + GATEWAY_TOKEN, "token");
    if (uri == null || token == null) {
      throw new IllegalArgumentException(
          "lakesession credential provider: no gateway configured: set "
              + GATEWAY_URI
              + " and "
              + GATEWAY_TOKEN
              + " (lakesession.spark(comet=True) sets them), keys present: "
              + props.keySet().stream().filter(k -> !k.toLowerCase().contains("token")).sorted().toList());
    }
    String refresh = props.get("client.refresh-credentials-endpoint");
    return new GatewayClient(baseOf(uri), token, refresh == null ? null : resolve(uri, refresh));
  }

  static String first(Map<String, String> props, String... keys) {
    for (String k : keys) {
      String v = props.get(k);
      if (v != null && !v.isBlank()) {
        return v.trim();
      }
    }
    return null;
  }

  /** A relative refresh endpoint is relative to the catalog URI (as Iceberg's RESTUtil resolves it). */
  static String resolve(String catalogUri, String endpoint) {
    if (endpoint.startsWith("http://") || endpoint.startsWith("https://")) {
      return endpoint;
    }
    String left = catalogUri.endsWith("/") ? catalogUri.substring(0, catalogUri.length() - 1) : catalogUri;
    return left + "/" + (endpoint.startsWith("/") ? endpoint.substring(1) : endpoint);
  }

  /** scheme://host:port of a URI: the gateway serves its own routes at its root. */
  static String baseOf(String uri) {
    URI u = URI.create(uri);
    if (u.getScheme() == null || u.getHost() == null) {
      throw new IllegalArgumentException("lakesession gateway uri is not an absolute http URL: " + uri);
    }
    return u.getScheme() + "://" + u.getHost() + (u.getPort() >= 0 ? ":" + u.getPort() : "");
  }

  String base() {
    return base;
  }

  /** Credentials covering {@code path} (s3://bucket/key) with at least {@code minValidSeconds} of life. */
  Creds pathCredentials(String path, String mode, int minValidSeconds) throws IOException {
    String url =
        base
            + "/lakesession/path-credentials?path="
            + enc(path)
            + "&mode="
            + enc(mode)
            + "&min-valid-seconds="
            + minValidSeconds;
    HttpResponse<String> r = get(url);
    if (r.statusCode() == 404 && refreshEndpoint != null) {
      r = get(refreshEndpoint); // a gateway without the path route (404; it refuses with 403): the table's
    }
    if (r.statusCode() != 200) {
      throw new GatewayException(r.statusCode(), path, errorMessage(r.body()));
    }
    return pick(r.body(), path);
  }

  /**
   * The gateway's answer for one bucket: the session's prefixes there and the keys covering them. One session
   * policy holds a bounded number of prefixes (STS: 2,048 characters), so a large union comes as several keys,
   * each entry carrying the key of its prefix; a request is signed with the key of the prefix its object key
   * lies in ({@link #credsFor}).
   */
  static final class BucketAnswer {
    final List<String> prefixes; // s3://bucket/prefix/ (normalized), sorted
    final Creds creds; // the first entry's key (requests naming no object); null when no prefix is in the bucket
    final Map<String, Creds> byPrefix; // normalized prefix -> the key covering it
    final Map<String, String> client; // s3.endpoint, s3.path-style-access, client.region as vended

    BucketAnswer(List<String> prefixes, Map<String, Creds> byPrefix, Map<String, String> client) {
      this.prefixes = prefixes;
      this.byPrefix = byPrefix;
      this.creds = byPrefix.isEmpty() ? null : byPrefix.values().iterator().next();
      this.client = client;
    }

    /** Whether {@code path} (s3://bucket/key) lies inside one of the prefixes (path-boundary safe). */
    boolean covers(String path) {
      for (String p : prefixes) {
        String bare = p.endsWith("/") ? p.substring(0, p.length() - 1) : p;
        if (path.startsWith(bare + "/") || path.equals(bare)) {
          return true;
        }
      }
      return false;
    }

    /** The key of the longest prefix covering {@code path}, else the first key (the store then decides). */
    Creds credsFor(String path) {
      Creds best = null;
      for (Creds c : byPrefix.values()) {
        if (c.covers(path) && (best == null || c.prefix.length() > best.prefix.length())) {
          best = c;
        }
      }
      return best != null ? best : creds;
    }

    /** The earliest expiry among the keys (the answer is refreshed as a whole). */
    long expiresAtMs() {
      long min = Long.MAX_VALUE;
      for (Creds c : byPrefix.values()) {
        min = Math.min(min, c.expiresAtMs);
      }
      return min;
    }

    /** How many distinct keys the answer holds. */
    int keyCount() {
      java.util.Set<String> ids = new java.util.HashSet<>();
      for (Creds c : byPrefix.values()) {
        ids.add(c.accessKeyId);
      }
      return ids.size();
    }
  }

  /** {@code GET /lakesession/bucket-credentials}: the union of this session's prefixes in {@code bucket}. */
  BucketAnswer bucketCredentials(String bucket, String mode, int minValidSeconds) throws IOException {
    String url =
        base
            + "/lakesession/bucket-credentials?bucket="
            + enc(bucket)
            + "&mode="
            + enc(mode)
            + "&min-valid-seconds="
            + minValidSeconds;
    HttpResponse<String> r = get(url);
    if (r.statusCode() != 200) {
      throw new GatewayException(r.statusCode(), "s3://" + bucket + "/", errorMessage(r.body()));
    }
    Object doc = Json.parse(r.body());
    List<String> prefixes = new ArrayList<>();
    Map<String, Creds> byPrefix = new java.util.LinkedHashMap<>();
    Map<String, String> client = new java.util.HashMap<>();
    if (doc instanceof Map) {
      Object ps = ((Map<?, ?>) doc).get("prefixes");
      if (ps instanceof List) {
        for (Object o : (List<?>) ps) {
          if (o instanceof String) {
            prefixes.add(normalize((String) o));
          }
        }
      }
      Object list = ((Map<?, ?>) doc).get("storage-credentials");
      for (Object o : list instanceof List ? (List<?>) list : List.of()) {
        if (!(o instanceof Map) || !(((Map<?, ?>) o).get("prefix") instanceof String)) {
          continue;
        }
        Object cfg = ((Map<?, ?>) o).get("config");
        if (!(cfg instanceof Map)) {
          continue;
        }
        Map<?, ?> c = (Map<?, ?>) cfg;
        Object exp = c.get("s3.session-token-expires-at-ms");
        String prefix = normalize((String) ((Map<?, ?>) o).get("prefix"));
        Creds creds =
            new Creds(
                prefix,
                str(c.get("s3.access-key-id")),
                str(c.get("s3.secret-access-key")),
                str(c.get("s3.session-token")),
                exp == null ? 0L : Long.parseLong(exp.toString()));
        if (creds.accessKeyId == null || creds.secretAccessKey == null) {
          continue;
        }
        if (client.isEmpty()) {
          for (String k : new String[] {"s3.endpoint", "s3.path-style-access", "client.region", "s3.region"}) {
            if (c.get(k) != null) {
              client.put(k, c.get(k).toString());
            }
          }
        }
        byPrefix.put(prefix, creds);
      }
    }
    return new BucketAnswer(prefixes, byPrefix, client);
  }

  /** The storage locations this session may read: tables it loaded, locations granted to the user. */
  List<String> policyLocations() throws IOException {
    HttpResponse<String> r = get(base + "/lakesession/policy-locations");
    if (r.statusCode() == 404) {
      return refreshPrefixes(); // a gateway without the route: the table's own prefix, if known
    }
    if (r.statusCode() != 200) {
      throw new GatewayException(r.statusCode(), "policy-locations", errorMessage(r.body()));
    }
    Object doc = Json.parse(r.body());
    List<String> out = new ArrayList<>();
    if (doc instanceof Map) {
      Object locs = ((Map<?, ?>) doc).get("locations");
      if (locs instanceof List) {
        for (Object o : (List<?>) locs) {
          if (o instanceof String) {
            out.add((String) o);
          } else if (o instanceof Map && ((Map<?, ?>) o).get("location") instanceof String) {
            out.add((String) ((Map<?, ?>) o).get("location"));
          }
        }
      }
    }
    return out;
  }

  private List<String> refreshPrefixes() throws IOException {
    List<String> out = new ArrayList<>();
    if (refreshEndpoint == null) {
      return out;
    }
    HttpResponse<String> r = get(refreshEndpoint);
    if (r.statusCode() != 200) {
      throw new GatewayException(r.statusCode(), "the table's credentials", errorMessage(r.body()));
    }
    Object doc = Json.parse(r.body());
    Object list = doc instanceof Map ? ((Map<?, ?>) doc).get("storage-credentials") : null;
    if (list instanceof List) {
      for (Object o : (List<?>) list) {
        if (o instanceof Map && ((Map<?, ?>) o).get("prefix") instanceof String) {
          out.add(normalize((String) ((Map<?, ?>) o).get("prefix")));
        }
      }
    }
    return out;
  }

  private HttpResponse<String> get(String url) throws IOException {
    HttpRequest req =
        HttpRequest.newBuilder(URI.create(url))
            .timeout(TIMEOUT)
            .header("Authorization", "Bearer " + secret)
            .header("Accept", "application/json")
            .GET()
            .build();
    try {
      return http.send(req, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while asking the lakesession gateway", e);
    } catch (IOException e) {
      throw new IOException(
          "lakesession gateway at " + base + " is unreachable (is the session closed?): " + e, e);
    }
  }

  /** The storage credential with the longest prefix that covers {@code path}. */
  static Creds pick(String body, String path) {
    Object doc = Json.parse(body);
    Creds best = null;
    Object list = doc instanceof Map ? ((Map<?, ?>) doc).get("storage-credentials") : null;
    if (list instanceof List) {
      for (Object o : (List<?>) list) {
        if (!(o instanceof Map)) {
          continue;
        }
        Map<?, ?> m = (Map<?, ?>) o;
        Object cfg = m.get("config");
        if (!(m.get("prefix") instanceof String) || !(cfg instanceof Map)) {
          continue;
        }
        Map<?, ?> c = (Map<?, ?>) cfg;
        String prefix = normalize((String) m.get("prefix"));
        Object exp = c.get("s3.session-token-expires-at-ms");
        Creds cand =
            new Creds(
                prefix,
                str(c.get("s3.access-key-id")),
                str(c.get("s3.secret-access-key")),
                str(c.get("s3.session-token")),
                exp == null ? 0L : Long.parseLong(exp.toString()));
        if (cand.accessKeyId == null || cand.secretAccessKey == null || !cand.covers(normalize(path))) {
          continue;
        }
        if (best == null || cand.prefix.length() > best.prefix.length()) {
          best = cand;
        }
      }
    }
    if (best == null) {
      throw new IllegalStateException("the lakesession gateway returned no credential covering " + path);
    }
    return best;
  }

  /** s3a:// and s3n:// name the same objects as s3://. */
  static String normalize(String location) {
    if (location.startsWith("s3a://") || location.startsWith("s3n://")) {
      return "s3://" + location.substring(6);
    }
    return location;
  }

  private static String str(Object o) {
    return o == null ? null : o.toString();
  }

  static String errorMessage(String body) {
    try {
      Object doc = Json.parse(body);
      if (doc instanceof Map && ((Map<?, ?>) doc).get("error") instanceof Map) {
        Object msg = ((Map<?, ?>) ((Map<?, ?>) doc).get("error")).get("message");
        if (msg != null) {
          return msg.toString();
        }
      }
    } catch (RuntimeException e) {
      // not JSON: fall through
    }
    return body.length() > 200 ? body.substring(0, 200) : body;
  }

  private static String enc(String s) {
    return URLEncoder.encode(s, StandardCharsets.UTF_8);
  }

  @Override
  public void close() {
    // java.net.http.HttpClient gained close() in JDK 21; on 17 its threads end with the last reference
    if (http instanceof AutoCloseable) {
      try {
        ((AutoCloseable) http).close();
      } catch (Exception e) {
        // resource hygiene only
      }
    }
  }

  @Override
  public String toString() {
    return "GatewayClient{" + base + "}";
  }

  /** A refusal by the gateway (403: not granted; 401: session closed), with the catalog's message. */
  static final class GatewayException extends IOException {
    private static final long serialVersionUID = 1L;
    final int status;

    GatewayException(int status, String what, String message) {
      super(
          "lakesession: access to "
              + what
              + " refused by the session's gateway (HTTP "
              + status
              + "): "
              + message);
      this.status = status;
    }
  }
}
