package dev.lakesession.engine;

import dev.lakesession.jvm.Json;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The sandbox's rulebook: {@code lakesession/_wire/engine_rules.json}, shipped in this jar as {@value
 * #RESOURCE} by {@code java/build.py}. The front door reads the same file, and the docs' rule table is
 * rendered from it, so the rules, their reasons, the Catalyst names refused, the protected setting
 * prefixes, the secret-key pattern, the refusal's error class and the signature trailer are written once.
 * A missing or unreadable rulebook fails the class's initialisation, and with it every check (closed).
 */
final class Rulebook {
  static final String RESOURCE = "/dev/lakesession/engine/rules.json";
  private static final Map<String, Object> BOOK = load();

  private Rulebook() {}

  @SuppressWarnings("unchecked")
  private static Map<String, Object> load() {
    try (InputStream in = Rulebook.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException("lakesession-jvm.jar has no " + RESOURCE);
      }
      return (Map<String, Object>) Json.parse(new String(in.readAllBytes(), StandardCharsets.UTF_8));
    } catch (IOException e) {
      throw new IllegalStateException("cannot read " + RESOURCE, e);
    }
  }

  /** A top-level string, or {@code section.key}'s. */
  static String string(String... path) {
    Object v = BOOK;
    for (String p : path) {
      v = ((Map<?, ?>) v).get(p);
    }
    if (!(v instanceof String s)) {
      throw new IllegalStateException("the rulebook has no string " + String.join(".", path));
    }
    return s;
  }

  /** A top-level list of strings. */
  static List<String> strings(String key) {
    List<String> out = new ArrayList<>();
    for (Object o : (List<?>) BOOK.get(key)) {
      out.add((String) o);
    }
    return out;
  }

  /** A top-level list of objects (Catalyst node and expression tables). */
  @SuppressWarnings("unchecked")
  static List<Map<String, Object>> entries(String key) {
    return (List<Map<String, Object>>) BOOK.get(key);
  }

  /** A rule's id, checked against the rulebook (a rule the Java code names must exist there). */
  static String rule(String id) {
    for (Map<String, Object> r : entries("rules")) {
      if (id.equals(r.get("id"))) {
        return id;
      }
    }
    throw new IllegalStateException("the rulebook has no rule " + id);
  }

  /** The reason (why, and what to do instead) named {@code id} in the rulebook's {@code reasons}. */
  static String reason(String id) {
    return string("reasons", id);
  }
}
