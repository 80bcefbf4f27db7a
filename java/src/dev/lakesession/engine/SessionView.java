package dev.lakesession.engine;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.internal.SQLConf;

/**
 * What every hook of one session needs: its SQL conf, its parser and catalogs, the sandbox's
 * settings, and the checks that hold whatever a statement says (fail closed).
 *
 * <p>The session's state is reached only when a statement is checked, never while Spark is still
 * building it (the hooks are built as part of that state).
 */
final class SessionView {
  /** The single-pass analyzer skips the early checks (they run in the fixed-point analyzer's hint batch). */
  private static final String[] SINGLE_PASS = {
    "spark.sql.analyzer.singlePassResolver.enabled",
    "spark.sql.analyzer.singlePassResolver.enabledTentatively",
    "spark.sql.analyzer.singlePassResolver.dualRunWithLegacy",
  };

  private final org.apache.spark.sql.classic.SparkSession session;

  SessionView(SparkSession session) {
    this.session = (org.apache.spark.sql.classic.SparkSession) session;
  }

  SQLConf conf() {
    return session.sessionState().conf();
  }

  /** The sandbox's settings now (both confs are read again for every statement). */
  Policy policy() {
    return Policy.of(Policy.Engine.current(), conf());
  }

  /**
   * The session's current catalog (USE / SET CATALOG / spark.sql.defaultCatalog). A current catalog
   * that cannot be loaded (its server is down) serves no statement: then the configured default's name.
   */
  String currentCatalog() {
    try {
      return session.sessionState().catalogManager().currentCatalog().name();
    } catch (Exception e) {
      return conf().getConfString("spark.sql.defaultCatalog", "spark_catalog");
    }
  }

  /** The catalogs the session lists (SHOW CATALOGS [LIKE pattern]): its loaded ones and spark_catalog. */
  scala.collection.immutable.Seq<String> listCatalogs(scala.Option<String> pattern) {
    return session.sessionState().catalogManager().listCatalogs(pattern);
  }

  /**
   * Refuses every statement while the session is set up so that a check could be skipped: the
   * sandbox's parser is not the outermost one (another extension listed after it would read SQL
   * text first, ${…} substitution included), or the single-pass analyzer is on (it has no hint batch).
   */
  void requireIntact() {
    if (!(session.sessionState().sqlParser() instanceof SandboxParser)) {
      throw Refused.refuse(
          "every statement",
          "settings",
          "dev.lakesession.engine.SandboxExtensions must be the last entry of spark.sql.extensions so that it reads SQL"
              + " text first; the engine's operator must fix spark.sql.extensions");
    }
    SQLConf conf = conf();
    for (String key : SINGLE_PASS) {
      if ("true".equalsIgnoreCase(conf.getConfString(key, "false").trim())) {
        throw Refused.refuse(
            "every statement",
            "settings",
            key + " is on in this session, and the sandbox's early checks run only in Spark's fixed-point analyzer;"
                + " the engine's operator must turn it off");
      }
    }
  }
}
