package dev.lakesession.engine;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.DataSource$;

/**
 * The checks that must happen before Spark resolves a statement, as a rule of the analyzer's "Hints"
 * batch (it runs before the "Resolution" batch, again on every view body, subquery and IDENTIFIER(…)
 * result Spark analyses, and on plans that never passed the parser: DataFrame reads, {@code
 * spark.table}).
 *
 * <p>Spark does real work while resolving some statements, before any check rule sees the result:
 * it runs CALL procedures ({@code InvokeProcedures}), EXECUTE IMMEDIATE statements, subqueries of
 * time-travel clauses ({@code EvalSubqueriesForTimeTravel}), and lists and samples files for reads
 * by path ({@code ResolveSQLOnFile}, {@code ResolveDataSource}: schema inference reads the files,
 * and an unresolved column's error then lists what it found). Those are refused here, on the
 * unresolved plan. The rule never changes the plan.
 */
final class EarlyChecks extends Rule<LogicalPlan> {
  private static final String FILE_FORMAT = "org.apache.spark.sql.execution.datasources.FileFormat";
  /** Spark looks "json", "parquet", … up as their v2 classes, and DataSource falls back to their FileFormat. */
  private static final String FILE_SOURCE_V2 = "org.apache.spark.sql.execution.datasources.v2.FileDataSourceV2";

  private final SessionView view;
  private final Map<String, Boolean> fileSources = new ConcurrentHashMap<>();

  EarlyChecks(SessionView view) {
    this.view = view;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    Policy policy = view.policy();
    if (!policy.sandbox) {
      return plan;
    }
    view.requireIntact();
    boolean sqlOnFiles = view.conf().runSQLonFile();
    try {
      Nodes.walk(
          plan,
          new Nodes.Visitor() {
            @Override
            public void plan(LogicalPlan node) {
              check(node, sqlOnFiles);
            }

            @Override
            public void expression(Expression expression) {}
          });
    } catch (Nodes.UnknownShape e) {
      throw Refused.cannotInspect(e);
    }
    return plan;
  }

  private void check(LogicalPlan node, boolean sqlOnFiles) {
    String name = Nodes.name(node);
    switch (name) {
      case "UnresolvedDataSource" -> dataSource(node);
      case "UnresolvedRelation" -> relation(node, sqlOnFiles);
      case "UnresolvedExecuteImmediate" -> throw Refused.refuse("EXECUTE IMMEDIATE", Why.DYNAMIC_SQL, Why.DYNAMIC);
      case "RelationTimeTravel" -> {
        Object ts = Nodes.unwrap(Nodes.field(node, "timestamp"));
        if (ts instanceof Expression e && hasSubquery(e)) {
          throw Refused.refuse("a subquery in a time-travel clause", Why.DYNAMIC_SQL, Why.TIME_TRAVEL);
        }
      }
      default -> {
        if ("Call".equals(name)
            || "CallStatement".equals(name)
            || Nodes.isA(node, "org.apache.spark.sql.catalyst.plans.logical.ExecutableDuringAnalysis")) {
          throw Refused.refuse("CALL of a stored procedure", Why.PROCEDURES, Why.PROCEDURE);
        }
      }
    }
  }

  /** spark.read / spark.readStream: only Iceberg tables named through a catalog. */
  private void dataSource(LogicalPlan node) {
    String format = Nodes.string(node, "format");
    if (Boolean.TRUE.equals(Nodes.field(node, "isStreaming"))) {
      throw Refused.refuse("a streaming read (format " + format + ")", Why.PATH_ACCESS, Why.PATH);
    }
    if (format == null || !"iceberg".equals(format.trim().toLowerCase(Locale.ROOT))) {
      throw Refused.refuse("reading the data source " + format + " (spark.read…load)", Why.PATH_ACCESS, Why.PATH);
    }
    List<String> names = new ArrayList<>(Nodes.strings(node, "paths"));
    Nodes.map(node, "options")
        .forEach(
            (k, v) -> {
              String key = k.toLowerCase(Locale.ROOT);
              if (key.equals("path") || key.equals("paths")) {
                names.add(v);
              }
            });
    for (String n : names) {
      // Iceberg reads a name holding a '/' as a path (HadoopTables), anything else as a catalog table
      if (n.contains("/")) {
        throw Refused.refuse("reading an Iceberg table by path", Why.PATH_ACCESS, Why.PATH);
      }
    }
  }

  /** `format`.`path` in SQL and spark.table(): Spark reads files when the first part names a file format. */
  private void relation(LogicalPlan node, boolean sqlOnFiles) {
    if (Boolean.TRUE.equals(Nodes.field(node, "isStreaming"))) {
      throw Refused.refuse("a streaming read", Why.PATH_ACCESS, Why.PATH);
    }
    List<String> parts = Nodes.strings(node, "multipartIdentifier");
    if (sqlOnFiles && parts.size() == 2 && isFileSource(parts.get(0))) {
      throw Refused.refuse(
          "reading files by path (" + parts.get(0) + ".`…`)",
          Why.PATH_ACCESS,
          Why.PATH + " (a table in a namespace named like a file format: name it with its catalog, catalog."
              + parts.get(0) + ".table)");
    }
  }

  /** Whether Spark would read {@code name}.`x` as files: {@code name} is a file-format data source. */
  private boolean isFileSource(String name) {
    return fileSources.computeIfAbsent(
        name.toLowerCase(Locale.ROOT),
        n -> {
          try {
            Class<?> cls = DataSource$.MODULE$.lookupDataSource(name, view.conf());
            return Nodes.isAssignable(cls, FILE_FORMAT) || Nodes.isAssignable(cls, FILE_SOURCE_V2);
          } catch (Exception | LinkageError e) {
            // not a data source Spark can load: ResolveSQLOnFile leaves such a name to the catalogs too
            return false;
          }
        });
  }

  private static boolean hasSubquery(Expression e) {
    List<Expression> todo = new ArrayList<>();
    todo.add(e);
    while (!todo.isEmpty()) {
      Expression x = todo.remove(todo.size() - 1);
      if (Nodes.isA(x, "org.apache.spark.sql.catalyst.expressions.PlanExpression")) {
        return true;
      }
      scala.collection.Iterator<Expression> it = x.children().iterator();
      while (it.hasNext()) {
        todo.add(it.next());
      }
    }
    return false;
  }
}
