package dev.lakesession.engine;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The front door's signature on the SQL texts it expanded (lakesession.engine._rewrite).
 *
 * <p>Only an expanded text may name the engine's view-chain catalogs: their tables are granted through
 * a view, so they must only ever be read through that view's own SQL. The front door appends
 * {@code \n/* lakesession-engine-signature: <hex> *}{@code /}, an HMAC-SHA-256 of the text before it with
 * the key in {@code spark.lakesession.engine.sqlKey} (the engine's SparkConf; no session can read or set
 * it). A view body, a CTAS or a MERGE that Spark resolves by itself is never signed; an edited text (its
 * WHERE dropped) no longer verifies.
 */
final class Signature {
  static final String KEY = "spark.lakesession.engine.sqlKey";
  private static final Pattern TRAILER = Pattern.compile(Rulebook.string("signature", "pattern")); // the rulebook's

  private Signature() {}

  /** Whether {@code sql} ends with a valid signature of the text before it under {@code hexKey}. */
  static boolean valid(String sql, String hexKey) {
    if (sql == null || hexKey == null || hexKey.isEmpty()) {
      return false;
    }
    Matcher m = TRAILER.matcher(sql);
    if (!m.find()) {
      return false;
    }
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(HexFormat.of().parseHex(hexKey), "HmacSHA256"));
      byte[] expected = mac.doFinal(sql.substring(0, m.start()).getBytes(StandardCharsets.UTF_8));
      byte[] given = HexFormat.of().parseHex(m.group(1));
      return MessageDigest.isEqual(expected, given);
    } catch (GeneralSecurityException | IllegalArgumentException e) {
      return false;
    }
  }
}
