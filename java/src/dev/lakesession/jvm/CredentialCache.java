package dev.lakesession.jvm;

import java.io.IOException;
import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Per-prefix cache of gateway credentials: hands out only credentials with at least {@code
 * minValidSeconds} left (the reader's I/O deadline), refreshes ahead in the background, and lets
 * one caller at a time fetch a given prefix (single flight).
 */
final class CredentialCache implements AutoCloseable {
  /** Every live cache, closed by one JVM shutdown hook (resource hygiene only). */
  private static final Set<CredentialCache> LIVE = Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap<>()));

  static {
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  CredentialCache[] all;
                  synchronized (LIVE) {
                    all = LIVE.toArray(new CredentialCache[0]);
                  }
                  for (CredentialCache c : all) {
                    try {
                      c.close();
                    } catch (RuntimeException e) {
                      // one cache's failure must not keep the others open
                    }
                  }
                },
                "lakesession-credentials-shutdown"));
  }

  /** Gateway round trips made by all caches of this JVM (benchmarks read it). */
  static final AtomicLong GATEWAY_CALLS = new AtomicLong();

  private final GatewayClient gateway;
  private final long minValidMs;
  private final Map<String, Entry> entries = new ConcurrentHashMap<>();
  private final Map<String, CompletableFuture<Creds>> inflight = new ConcurrentHashMap<>();
  private final ExecutorService refresher;
  private volatile boolean closed;

  CredentialCache(GatewayClient gateway, int minValidSeconds) {
    this.gateway = gateway;
    this.minValidMs = minValidSeconds * 1000L;
    this.refresher =
        Executors.newSingleThreadExecutor(
            r -> {
              Thread t = new Thread(r, "lakesession-credentials-refresh");
              t.setDaemon(true);
              return t;
            });
    LIVE.add(this);
  }

  GatewayClient gateway() {
    return gateway;
  }

  private static final class Entry {
    final Creds creds;
    final long fetchedAtMs;

    Entry(Creds creds, long fetchedAtMs) {
      this.creds = creds;
      this.fetchedAtMs = fetchedAtMs;
    }

    /** Refresh ahead once a quarter of the usable life (beyond the deadline) is left. */
    boolean dueForRefresh(long now, long minValidMs) {
      long usable = Math.max(creds.expiresAtMs - fetchedAtMs - minValidMs, 0);
      return creds.expiresAtMs - now < minValidMs + usable / 4;
    }
  }

  /** A credential covering {@code path} in {@code mode} ("read"/"write") with enough life left. */
  Creds get(String path, String mode) throws IOException {
    if (closed) {
      throw new IOException("lakesession credential provider is closed");
    }
    String p = GatewayClient.normalize(path);
    long now = System.currentTimeMillis();
    Entry best = lookup(p, mode);
    if (best != null && best.creds.leftMs(now) >= minValidMs) {
      if (best.dueForRefresh(now, minValidMs)) {
        String key = mode + " " + best.creds.prefix;
        refresher.execute(
            () -> {
              try {
                fetch(key, p, mode);
              } catch (IOException | RuntimeException e) {
                // the next caller retries in the foreground and sees the error
              }
            });
      }
      return best.creds;
    }
    return fetch(mode + " " + (best != null ? best.creds.prefix : p), p, mode);
  }

  private Entry lookup(String path, String mode) {
    Entry best = null;
    for (Map.Entry<String, Entry> e : entries.entrySet()) {
      Creds c = e.getValue().creds;
      if (e.getKey().startsWith(mode + " ")
          && c.covers(path)
          && (best == null || c.prefix.length() > best.creds.prefix.length())) {
        best = e.getValue();
      }
    }
    return best;
  }

  /** Single flight: concurrent callers for one key share one gateway round trip. */
  private Creds fetch(String key, String path, String mode) throws IOException {
    CompletableFuture<Creds> mine = new CompletableFuture<>();
    CompletableFuture<Creds> running = inflight.putIfAbsent(key, mine);
    if (running == null) {
      try {
        GATEWAY_CALLS.incrementAndGet();
        Creds c = gateway.pathCredentials(path, mode, (int) (minValidMs / 1000));
        entries.put(mode + " " + c.prefix, new Entry(c, System.currentTimeMillis()));
        mine.complete(c);
        return c;
      } catch (IOException | RuntimeException e) {
        if (e instanceof GatewayClient.GatewayException && ((GatewayClient.GatewayException) e).status == 403) {
          entries.entrySet().removeIf(x -> x.getValue().creds.covers(path)); // revoked: forget it at once
        }
        mine.completeExceptionally(e);
        throw e;
      } finally {
        inflight.remove(key, mine);
      }
    }
    try {
      return running.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while waiting for lakesession credentials", e);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof IOException) {
        throw (IOException) cause;
      }
      throw new IOException(cause.getMessage(), cause);
    }
  }

  @Override
  public void close() {
    closed = true;
    refresher.shutdownNow();
    entries.clear();
    gateway.close();
    LIVE.remove(this);
  }
}
