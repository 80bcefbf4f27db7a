package dev.lakesession.engine;

import java.util.Map;
import org.apache.spark.BreakingChangeInfo;
import org.apache.spark.SparkThrowable;

/**
 * What every sandbox rule throws: {@code lakesession engine refused <what>: rule '<rule>' (<why>)},
 * one line.
 *
 * <p>A {@link SecurityException} that is also a {@link SparkThrowable} (error class {@code
 * LAKESESSION_ENGINE_REFUSED}, SQLSTATE 42501, parameters what/rule/why). Not an {@code
 * AnalysisException}: Spark wraps every AnalysisException a check rule throws into an {@code
 * ExtendedAnalysisException} whose message appends the whole analysed plan (several lines, and the
 * statement's own values, e.g. what a SET tried to set). Spark Connect sends this exception's class,
 * error class, SQLSTATE, parameters and message unchanged; PySpark's Connect client raises it as an
 * exception whose text is {@code (dev.lakesession.engine.Refused) lakesession engine refused …}, the
 * class the front door's own refusals name too. The message never holds a setting's value, and
 * {@link #scrub} keeps it to one bounded line whatever a user typed into the part naming what was
 * refused.
 */
public final class Refused extends SecurityException implements SparkThrowable {
  private static final long serialVersionUID = 1L;

  /** The error class a client can match on (it is not in Spark's error-conditions file). */
  public static final String ERROR_CLASS = Rulebook.string("refusal", "error_class");
  /** SQLSTATE 42501: insufficient privilege. */
  public static final String SQL_STATE = Rulebook.string("refusal", "sql_state");

  private static final String PREFIX = Rulebook.string("refusal", "prefix");
  private static final String TEMPLATE = PREFIX + "<what>: rule '<rule>' (<why>)";
  private static final int MAX_WHAT = 160;

  private final String what;
  private final String rule;
  private final String why;

  private Refused(String what, String rule, String why) {
    super(PREFIX + what + ": rule '" + rule + "' (" + why + ")");
    this.what = what;
    this.rule = rule;
    this.why = why;
  }

  /** The rule that refused. */
  public String rule() {
    return rule;
  }

  /**
   * Throws the refusal. Declared to return one so call sites read {@code throw Refused.refuse(…)}
   * and the compiler knows control ends there.
   */
  static Refused refuse(String what, String rule, String why) {
    throw new Refused(scrub(what, MAX_WHAT), rule, scrub(why, Integer.MAX_VALUE));
  }

  /** A node lacks a field a check reads: refuse rather than guess (a Spark version the sandbox does not know). */
  static Refused cannotInspect(Nodes.UnknownShape e) {
    return refuse(
        "a statement the sandbox cannot inspect",
        Why.SETTINGS,
        "this Spark version's plans differ from the ones the sandbox was written for (" + e.getMessage()
            + "); the engine's operator must update lakesession");
  }

  /** One line, no control characters, at most {@code max} characters (then an ellipsis). */
  static String scrub(String text, int max) {
    String t = text == null ? "null" : text;
    StringBuilder out = new StringBuilder(Math.min(t.length(), max));
    for (int i = 0; i < t.length(); i++) {
      if (out.length() >= max) {
        out.append('…');
        break;
      }
      char c = t.charAt(i);
      int type = Character.getType(c);
      boolean breaks = Character.isISOControl(c) || type == Character.LINE_SEPARATOR || type == Character.PARAGRAPH_SEPARATOR;
      out.append(breaks ? ' ' : c);
    }
    return out.toString();
  }

  @Override
  public String getCondition() {
    return ERROR_CLASS;
  }

  @Override
  public String getSqlState() {
    return SQL_STATE;
  }

  @Override
  public boolean isInternalError() {
    return false;
  }

  @Override
  public BreakingChangeInfo getBreakingChangeInfo() {
    return null;
  }

  @Override
  public Map<String, String> getMessageParameters() {
    return Map.of("what", what, "rule", rule, "why", why);
  }

  @Override
  public String getDefaultMessageTemplate() {
    return TEMPLATE;
  }
}
