package dev.lakesession.engine;

import org.apache.spark.sql.SparkSessionExtensions;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The JVM half of {@code lakesession engine}'s sandbox: what a user of the platform's Spark Connect
 * server may not do through SQL or DataFrames, whatever way the plan arrived.
 *
 * <pre>
 * spark.sql.extensions = org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,dev.lakesession.engine.SandboxExtensions
 * spark.lakesession.engine.sandbox = true
 * spark.lakesession.engine.settableConfs = spark.sql.shuffle.partitions,spark.sql.session.timeZone,…
 * spark.lakesession.engine.protectedConfPrefixes = spark.sql.catalog.,spark.hadoop.,spark.lakesession.,…
 * spark.lakesession.engine.internalCatalogPrefix = lake__chain_
 * </pre>
 *
 * <p>The engine's sessions hold vended storage credentials in Iceberg's FileIO, and every user's
 * session shares one JVM, one SparkContext, one cache and one session catalog. The sandbox keeps
 * users to queries over the catalog's tables. It is a second layer: the gRPC front door refuses
 * RPC-level things (artifacts, UDF messages, streaming, config RPCs, {@code persist}) before the
 * server sees them; this layer is authoritative for SQL and for every plan the server analyses.
 *
 * <h2>Where it hooks in</h2>
 *
 * <ul>
 *   <li>a <b>check rule</b> ({@link PlanChecks}): every analysed plan, before any command in it runs;
 *       it walks the whole plan (subqueries, CTEs, view bodies, CREATE VIEW/CACHE bodies, write
 *       targets) and refuses by node class name;
 *   <li>a rule of the analyzer's <b>hints batch</b> ({@link EarlyChecks}), for what Spark does while
 *       resolving a statement, before a check rule could see it (CALL runs procedures, EXECUTE
 *       IMMEDIATE runs its statement, time-travel subqueries run, reads by path list and sample files);
 *   <li>a <b>parser wrapper</b> ({@link SandboxParser}), for what no plan shows: {@code ${…}}
 *       substitution of settings and environment variables into SQL text, and SQL scripts;
 *   <li>a rule of the analyzer's <b>resolution</b> batch ({@link BuiltNames}): a name built at run time
 *       ({@code IDENTIFIER(expr)}) is refused the moment its value names a view-chain catalog, before
 *       Spark resolves a function by it (a resolved function no longer says which catalog it came from);
 *   <li>a rule of the analyzer's <b>post-hoc resolution</b> batch ({@link UserFacing}): {@code
 *       current_user()} answers the session's authenticated user, and catalog listings leave out the
 *       view-chain catalogs.
 * </ul>
 *
 * The rules' names, reasons and the Catalyst names they refuse come from the rulebook this jar carries
 * ({@link Rulebook}; the front door and the docs read the same file).
 *
 * It must be the <b>last</b> entry of {@code spark.sql.extensions} (its parser must read SQL text
 * first); otherwise, or with Spark's single-pass analyzer switched on, every statement is refused.
 *
 * <h2>Settings</h2>
 *
 * Read from the session's SQL conf for every statement; a session may only tighten what the engine's
 * own Spark conf says (see {@link Policy}): {@code spark.lakesession.engine.sandbox=true} turns it
 * on (absent or false: nothing is checked; ordinary lakesession sessions load the same jar);
 * {@code settableConfs} lists the exact keys a user may SET/RESET (case-insensitive);
 * {@code protectedConfPrefixes} and Spark's {@code spark.redaction.regex} name the keys a user may
 * not even read; {@code internalCatalogPrefix} names the engine's view-chain catalogs.
 *
 * <h2>Rules</h2>
 *
 * Each refusal is a {@link Refused} (a {@code SecurityException} and a {@code SparkThrowable}: error
 * class {@code LAKESESSION_ENGINE_REFUSED}, SQLSTATE 42501) whose message is one line: {@code
 * lakesession engine refused <what>: rule '<rule>' (<why, and what to do instead>)}. A Spark Connect
 * client sees {@code (dev.lakesession.engine.Refused) lakesession engine refused …}. Messages never
 * hold a setting's value.
 *
 * <ul>
 *   <li><b>user-code</b> — Python, Scala, Java and Hive UDFs/UDAFs/UDTFs (every {@code
 *       UserDefinedExpression} except a catalog plugin's own functions), typed aggregators;
 *       mapInPandas/mapInArrow, applyInPandas/applyInArrow (grouped and co-grouped, with state),
 *       transformWithState; the Dataset API's closures (MapPartitions, MapElements, MapGroups,
 *       CoGroup, FlatMapGroupsWithState, AppendColumns, TypedFilter, the R variants); DataFrames over
 *       RDDs ({@code createDataFrame(rdd)}, checkpoints); {@code SELECT TRANSFORM … USING 'cmd'};
 *       Python data sources. Why: it would run
 *       the user's own code in the JVM (or a worker it starts) that holds other users' credentials.
 *   <li><b>reflection</b> — {@code reflect}, {@code java_method}, {@code try_reflect}
 *       (CallMethodViaReflection); {@code from_protobuf}/{@code to_protobuf} (they load classes by
 *       name or read descriptor files). Why: calling arbitrary Java methods is running code.
 *       ({@code StaticInvoke}/{@code Invoke} are not reachable from SQL with a target of the user's
 *       choosing: only built-ins such as {@code aes_encrypt} make them, with fixed targets.)
 *   <li><b>artifacts</b> — ADD JAR/FILE/ARCHIVE, LIST JAR/FILE/ARCHIVE, every CREATE [TEMPORARY]
 *       FUNCTION (Java class or SQL body), REFRESH FUNCTION. Why: added code and files belong to the
 *       whole engine, not to a session.
 *   <li><b>path-access</b> — every relation that is not an Iceberg table loaded through a catalog or
 *       a local one (VALUES, {@code range()}, CTEs, local data): v1 data sources of any format
 *       ({@code parquet.`s3a://…`}, {@code json.`file:/etc/passwd`}, {@code spark.read.parquet}),
 *       Hive tables, streaming sources, v2 sources that are not Iceberg ({@code FileTable}, JDBC, …),
 *       Iceberg tables loaded by path; writes by path (INSERT OVERWRITE DIRECTORY, {@code
 *       df.write.save(path)}, LOAD DATA, CREATE TEMPORARY VIEW … USING); a location chosen by the
 *       user (CREATE/REPLACE TABLE … LOCATION, a {@code path}/{@code location} option or any
 *       {@code *.path}/{@code *.location} table property such as Iceberg's {@code write.data.path},
 *       ALTER TABLE/NAMESPACE … SET LOCATION, ADD PARTITION … LOCATION, CREATE NAMESPACE …
 *       LOCATION); REFRESH of a path; commands of external data sources; any table, view or
 *       namespace created in the session catalog {@code spark_catalog} (shared by all users, on the
 *       engine's own disk). Why: storage reached by path uses the engine's access, not the
 *       catalog's per-table grants.
 *   <li><b>procedures</b> — CALL of any stored procedure (Iceberg's register_table, add_files,
 *       migrate, snapshot, remove_orphan_files, … take paths). Refused before Spark runs it, which
 *       Spark 4 does while analysing the statement.
 *   <li><b>shared-state</b> — CACHE TABLE, CACHE … AS SELECT, UNCACHE TABLE, CLEAR CACHE, CREATE
 *       GLOBAL TEMPORARY VIEW, reading a global temporary view, persisted views in {@code
 *       spark_catalog}. Why: Spark shares them between every session of the engine.
 *   <li><b>settings</b> — {@code SET key=value} and {@code RESET key} for a key not in
 *       settableConfs (never {@code spark.lakesession.*}); {@code SET key} for a protected key;
 *       {@code SET} and {@code SET -v} (they list protected keys); {@code RESET} of everything;
 *       {@code ${…}} substitution in SQL text; and, failing closed, every statement when the sandbox
 *       is not the last extension or Spark's single-pass analyzer is on.
 *   <li><b>internal-catalog</b> — USE / SET CATALOG / SHOW TABLES|VIEWS|NAMESPACES IN / namespace
 *       commands naming a catalog under internalCatalogPrefix; any statement while such a catalog is
 *       current (but the USE that leaves it); after analysis, every node resolved from such a catalog
 *       (a relation, a write target, a resolved table or identifier) whose origin is not a statement
 *       the front door signed, however its name was built (IDENTIFIER, parameters, variables, view
 *       bodies, DataFrame reads). Why: those catalogs hold tables granted only through a DEFINER view.
 *   <li><b>dynamic-sql</b> — EXECUTE IMMEDIATE, SQL scripts (BEGIN … END), a subquery in a
 *       time-travel clause. Why: the statement that runs is decided while Spark analyses it, before
 *       the check sees it (Spark would check EXECUTE IMMEDIATE's inner statement again, but the front
 *       door and the audit see only the outer text).
 * </ul>
 *
 * <h2>What no hook here sees (the front door's part)</h2>
 *
 * Spark Connect RPCs that act without a plan: the config RPC ({@code spark.conf.get/set/getAll}:
 * it reads protected keys and sets session keys; here a session can only tighten the sandbox, and a
 * switch to the single-pass analyzer fails closed), {@code persist}/{@code cache()} (the shared
 * cache), the catalog API's cacheTable/uncacheTable/clearCache/refreshByPath/setCurrentCatalog (the
 * last is caught here afterwards: nothing runs while an internal catalog is current), artifact
 * uploads, UDF/UDTF/data-source registration (a Python UDTF's {@code analyze} runs while Spark
 * resolves the call), ML and pipeline commands, streaming query commands, checkpoints. And {@code
 * df.write.format(<a v2 source, e.g. iceberg>).save(path)}: Spark's writer loads that source's table
 * (for Iceberg: the table at that path) before any analysis; the write itself is refused here.
 *
 * <h2>Allowed</h2>
 *
 * SELECT, INSERT, MERGE, UPDATE, DELETE, CREATE/REPLACE TABLE [AS SELECT] without a location,
 * CREATE VIEW, DROP, ALTER (but a location), DESCRIBE, SHOW, on Iceberg catalogs' tables; local
 * temporary views; VALUES, {@code range()}, built-in functions and the catalogs' own functions;
 * {@code SET} of settable keys and reading unprotected ones; USE of ordinary catalogs and
 * namespaces. EXPLAIN is allowed: nothing runs, and Spark analyses the explained statement with
 * the same checks, so EXPLAIN of a refused statement is refused too (or prints the refusal).
 */
public final class SandboxExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  public SandboxExtensions() {}

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectParser((session, delegate) -> new SandboxParser(new SessionView(session), delegate));
    extensions.injectHintResolutionRule(session -> new EarlyChecks(new SessionView(session)));
    extensions.injectResolutionRule(session -> new BuiltNames(new SessionView(session)));
    extensions.injectPostHocResolutionRule(session -> new UserFacing(new SessionView(session)));
    extensions.injectCheckRule(session -> new PlanChecks(new SessionView(session)));
    return BoxedUnit.UNIT;
  }
}
