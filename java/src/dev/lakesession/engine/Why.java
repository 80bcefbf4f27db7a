package dev.lakesession.engine;

/** The rules' names and the reasons their refusals give (each says what to do instead): from the rulebook. */
final class Why {
  static final String USER_CODE = Rulebook.rule("user-code");
  static final String REFLECTION = Rulebook.rule("reflection");
  static final String ARTIFACTS = Rulebook.rule("artifacts");
  static final String PATH_ACCESS = Rulebook.rule("path-access");
  static final String PROCEDURES = Rulebook.rule("procedures");
  static final String SHARED_STATE = Rulebook.rule("shared-state");
  static final String SETTINGS = Rulebook.rule("settings");
  static final String INTERNAL_CATALOG = Rulebook.rule("internal-catalog");
  static final String DYNAMIC_SQL = Rulebook.rule("dynamic-sql");

  static final String CODE = Rulebook.reason("code");
  static final String RDD = Rulebook.reason("rdd");
  static final String CALLS_JAVA = Rulebook.reason("calls-java");
  static final String LOADS_CLASSES = Rulebook.reason("loads-classes");
  static final String ADDS_CODE = Rulebook.reason("adds-code");
  static final String PATH = Rulebook.reason("path");
  static final String LOCATION = Rulebook.reason("location");
  static final String SESSION_CATALOG = Rulebook.reason("session-catalog");
  static final String EXTERNAL = Rulebook.reason("external");
  static final String PROCEDURE = Rulebook.reason("procedure");
  static final String SHARED = Rulebook.reason("shared");
  static final String SET_KEY = Rulebook.reason("set-key");
  static final String READ_KEY = Rulebook.reason("read-key");
  static final String LIST_KEYS = Rulebook.reason("list-keys");
  static final String RESET_ALL = Rulebook.reason("reset-all");
  static final String SUBSTITUTION = Rulebook.reason("substitution");
  static final String INTERNAL = Rulebook.reason("internal");
  static final String DYNAMIC = Rulebook.reason("dynamic");
  static final String TIME_TRAVEL = Rulebook.reason("time-travel");

  private Why() {}
}
