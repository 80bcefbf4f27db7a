package dev.lakesession.engine;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.internal.SQLConf;

/**
 * The sandbox's settings as they stand for one statement of one session.
 *
 * <p>Read afresh for every statement from the session's SQL conf, so per-session values (set by the
 * platform when it opens a user's session) apply, and from the engine's own Spark conf (the
 * SparkContext's). A session can only <em>tighten</em> what the engine's conf says: Spark Connect lets a client
 * set session keys through its config RPC, which no SQL rule sees, so a session value can switch
 * the sandbox on but never off, can narrow the settable keys but not widen them, and adds
 * protected prefixes and internal-catalog prefixes to the engine's.
 */
final class Policy {
  static final String PREFIX = Rulebook.string("internal_conf_prefix");
  static final String SANDBOX = "spark.lakesession.engine.sandbox";
  static final String SETTABLE = "spark.lakesession.engine.settableConfs";
  static final String PROTECTED = "spark.lakesession.engine.protectedConfPrefixes";
  static final String INTERNAL = "spark.lakesession.engine.internalCatalogPrefix";
  static final String REDACTION = "spark.redaction.regex";
  /** Keys named like a secret are protected whatever spark.redaction.regex says (the rulebook's pattern). */
  static final Pattern SECRET_KEY = Pattern.compile(Rulebook.string("secret_key_pattern"));
  /** Prefixes protected whatever the engine's conf says (the rulebook's always_protected_conf_prefixes). */
  static final List<String> ALWAYS_PROTECTED = List.copyOf(Rulebook.strings("always_protected_conf_prefixes"));
  static final String DEFAULT_REDACTION = SECRET_KEY.pattern();

  /** The engine's own values: the SparkContext's conf (SparkEnv's live copy, not a session's). */
  static final class Engine {
    final String sandbox;
    final String settable;
    final String protectedPrefixes;
    final String internal;
    final String redaction;
    final String sqlKey;

    Engine(SparkConf conf) {
      sandbox = conf.get(SANDBOX, null);
      settable = conf.get(SETTABLE, null);
      protectedPrefixes = conf.get(PROTECTED, null);
      internal = conf.get(INTERNAL, null);
      redaction = conf.get(REDACTION, DEFAULT_REDACTION);
      sqlKey = conf.get(Signature.KEY, null);
    }

    static Engine current() {
      return new Engine(SparkEnv.get().conf());
    }
  }

  final boolean sandbox;
  private final Set<String> settable;
  private final List<String> protectedPrefixes;
  private final List<String> internalPrefixes;
  private final List<Pattern> redaction;

  private Policy(
      boolean sandbox,
      Set<String> settable,
      List<String> protectedPrefixes,
      List<String> internalPrefixes,
      List<Pattern> redaction) {
    this.sandbox = sandbox;
    this.settable = settable;
    this.protectedPrefixes = protectedPrefixes;
    this.internalPrefixes = internalPrefixes;
    this.redaction = redaction;
  }

  static Policy of(Engine engine, SQLConf conf) {
    boolean sandbox =
        "true".equalsIgnoreCase(trim(engine.sandbox)) || "true".equalsIgnoreCase(trim(conf.getConfString(SANDBOX, "")));
    if (!sandbox) {
      return new Policy(false, Set.of(), List.of(), List.of(), List.of());
    }
    Set<String> settable = new LinkedHashSet<>(split(conf.getConfString(SETTABLE, "")));
    if (engine.settable != null) {
      settable.retainAll(split(engine.settable));
    }
    Set<String> prefixes = new LinkedHashSet<>(ALWAYS_PROTECTED);
    prefixes.addAll(split(engine.protectedPrefixes));
    prefixes.addAll(split(conf.getConfString(PROTECTED, "")));
    Set<String> internal = new LinkedHashSet<>(split(engine.internal));
    internal.addAll(split(conf.getConfString(INTERNAL, "")));
    List<Pattern> redaction = new ArrayList<>();
    redaction.add(compile(engine.redaction));
    String own = conf.getConfString(REDACTION, engine.redaction);
    if (!own.equals(engine.redaction)) {
      redaction.add(compile(own));
    }
    return new Policy(true, settable, List.copyOf(prefixes), List.copyOf(internal), redaction);
  }

  /** A key a user may SET or RESET: listed in settableConfs, and neither protected nor the engine's own. */
  boolean settable(String key) {
    String k = norm(key);
    return settable.contains(k) && !k.startsWith(PREFIX) && !isProtected(key);
  }

  /** A key a user may not even read: under a protected prefix, or matched by Spark's redaction pattern. */
  boolean isProtected(String key) {
    String k = norm(key);
    for (String p : protectedPrefixes) {
      if (k.startsWith(p)) {
        return true;
      }
    }
    if (SECRET_KEY.matcher(key).find()) {
      return true;
    }
    for (Pattern p : redaction) {
      if (p.matcher(key).find()) {
        return true;
      }
    }
    return false;
  }

  /** Whether {@code text} mentions an internal-catalog prefix anywhere (case-insensitive). */
  boolean mentionsInternal(String text) {
    if (text == null) {
      return false;
    }
    String t = text.toLowerCase(Locale.ROOT);
    for (String p : internalPrefixes) {
      if (t.contains(p)) {
        return true;
      }
    }
    return false;
  }

  /** A catalog name starting with an internal-catalog prefix (the engine's view-chain catalogs). */
  boolean internalCatalog(String catalog) {
    if (catalog == null) {
      return false;
    }
    String c = norm(catalog);
    for (String p : internalPrefixes) {
      if (c.startsWith(p)) {
        return true;
      }
    }
    return false;
  }

  private static Pattern compile(String regex) {
    try {
      return Pattern.compile(regex);
    } catch (PatternSyntaxException e) {
      // an unusable pattern protects every key rather than none
      return Pattern.compile("");
    }
  }

  private static String trim(String s) {
    return s == null ? "" : s.trim();
  }

  private static String norm(String s) {
    return s.trim().toLowerCase(Locale.ROOT);
  }

  private static List<String> split(String csv) {
    List<String> out = new ArrayList<>();
    if (csv == null) {
      return out;
    }
    for (String part : csv.split(",")) {
      String p = norm(part);
      if (!p.isEmpty()) {
        out.add(p);
      }
    }
    return out;
  }
}
