package dev.lakesession.engine;

/** The rules' names and the reasons their refusals give (each says what to do instead). */
final class Why {
  static final String USER_CODE = "user-code";
  static final String REFLECTION = "reflection";
  static final String ARTIFACTS = "artifacts";
  static final String PATH_ACCESS = "path-access";
  static final String PROCEDURES = "procedures";
  static final String SHARED_STATE = "shared-state";
  static final String SETTINGS = "settings";
  static final String INTERNAL_CATALOG = "internal-catalog";
  static final String DYNAMIC_SQL = "dynamic-sql";

  static final String CODE =
      "it would run the user's own code inside the engine, beside other users' credentials; use SQL and built-in functions";
  static final String RDD =
      "an RDD runs its own functions (the user's code) or holds a checkpoint the engine keeps; build DataFrames from"
          + " SQL, tables or local data";
  static final String CALLS_JAVA =
      "calling Java methods from SQL would run code beside other users' credentials; use built-in functions";
  static final String LOADS_CLASSES =
      "it loads Java classes by name or reads descriptor files from the engine's disk; decode with built-in functions";
  static final String ADDS_CODE =
      "jars, files and functions added to the engine are shared by every user's session; the engine runs only its own code";
  static final String PATH =
      "reading or writing storage by path would use the engine's own storage access instead of the catalog's grants;"
          + " use the catalog's tables";
  static final String LOCATION =
      "a table or namespace location chosen by a user could point at another table's storage; let the catalog choose"
          + " the location";
  static final String SESSION_CATALOG =
      "the session catalog spark_catalog is shared by every user of the engine and stores on the engine's own disk;"
          + " create it in an Iceberg catalog";
  static final String EXTERNAL =
      "it would reach a system outside the catalog with the engine's network and credentials; use the catalog's tables";
  static final String PROCEDURE =
      "stored procedures act on storage paths and table metadata with the engine's access; ask the table's owner to"
          + " run it outside the engine";
  static final String SHARED =
      "Spark shares caches and global views between every session of the engine, so other users would see them;"
          + " use a local temporary view";
  static final String SET_KEY =
      "a session may change only the settings the engine lists in spark.lakesession.engine.settableConfs, and never"
          + " spark.lakesession.* settings";
  static final String READ_KEY =
      "it is a protected setting of the engine (catalog, storage or engine configuration, or a secret); it cannot be"
          + " read from a session";
  static final String LIST_KEYS =
      "it would list the session's settings, protected ones included; read one setting with SET <key>";
  static final String RESET_ALL =
      "it would reset the settings the engine gave this session, the sandbox's own included; reset one setting with"
          + " RESET <key>";
  static final String SUBSTITUTION =
      "${...} substitution would read engine settings, system properties or environment variables into the"
          + " statement; write the value itself";
  static final String INTERNAL =
      "the engine's view-chain catalogs hold tables granted only through a view; query the view instead";
  static final String DYNAMIC =
      "the statement it runs is decided while Spark analyses it, before the engine checks it; run the statement itself";
  static final String TIME_TRAVEL =
      "Spark runs a subquery in a time-travel clause while analysing the statement, before the engine checks it;"
          + " use a literal timestamp or version";

  private Why() {}
}
