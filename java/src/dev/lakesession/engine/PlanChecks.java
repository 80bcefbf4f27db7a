package dev.lakesession.engine;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import scala.Tuple2;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The authoritative check: every analysed plan, before any command in it runs (Spark's
 * {@code checkAnalysis} calls it last, and commands execute only after analysis). It walks the
 * whole plan ({@link Nodes#walk}: subqueries, view bodies, CACHE/CREATE VIEW bodies, write targets,
 * EXPLAIN's statement) and refuses by node class name; see {@link SandboxExtensions} for the rules.
 */
final class PlanChecks extends AbstractFunction1<LogicalPlan, BoxedUnit> {
  private record Verdict(String rule, String what, String why) {}

  /** Plan nodes refused whatever their fields say, by simple class name. */
  private static final Map<String, Verdict> NODES = new HashMap<>();
  /** The same for the few whose simple name is ambiguous, by full class name. */
  private static final Map<String, Verdict> CLASSES = new HashMap<>();
  /** Expressions refused by simple class name. */
  private static final Map<String, Verdict> EXPRESSIONS = new HashMap<>();
  /** Leaf relations that read no storage of their own (the rest of Spark's relations are refused). */
  private static final Set<String> LOCAL_RELATIONS =
      Set.of("LocalRelation", "Range", "OneRowRelation", "CTERelationRef", "InMemoryRelation", "V2TableReference");

  private static final Pattern LOCATION_KEY = Pattern.compile("(?i)^(location|path|paths)$|\\.(path|location)$");
  private static final String SESSION_CATALOG = "spark_catalog";

  static {
    // the rulebook's tables (lakesession/_wire/engine_rules.json): rule, reason id, what (null: "the operation <name>")
    for (Map<String, Object> e : Rulebook.entries("catalyst_nodes")) {
      for (Object n : (List<?>) e.get("names")) {
        String what = e.get("what") == null ? "the operation " + n : (String) e.get("what");
        NODES.put((String) n, verdict(e, what));
      }
    }
    for (Map<String, Object> e : Rulebook.entries("catalyst_classes")) { // by full class name (ambiguous simple names)
      CLASSES.put((String) e.get("class"), verdict(e, (String) e.get("what")));
    }
    for (Map<String, Object> e : Rulebook.entries("catalyst_expressions")) {
      for (Object n : (List<?>) e.get("names")) {
        EXPRESSIONS.put((String) n, verdict(e, null));
      }
    }
  }

  private static Verdict verdict(Map<String, Object> entry, String what) {
    return new Verdict(Rulebook.rule((String) entry.get("rule")), what, Rulebook.reason((String) entry.get("reason")));
  }

  private final SessionView view;

  PlanChecks(SessionView view) {
    this.view = view;
  }

  @Override
  public BoxedUnit apply(LogicalPlan plan) {
    Policy policy = view.policy();
    if (!policy.sandbox) {
      return BoxedUnit.UNIT;
    }
    view.requireIntact();
    Map<String, Boolean> signed = new HashMap<>(); // sqlText -> whether the front door signed it (one HMAC per text)
    try {
      if (policy.internalCatalog(view.currentCatalog()) && !leavesCatalog(plan, policy)) {
        throw Refused.refuse(
            "a statement while the current catalog is an internal catalog",
            Why.INTERNAL_CATALOG,
            Why.INTERNAL + "; USE another catalog first");
      }
      Nodes.walk(
          plan,
          new Nodes.Visitor() {
            @Override
            public void plan(LogicalPlan node) {
              checkNode(node, policy);
              chainCatalog(node, policy, signed);
            }

            @Override
            public void expression(Expression expression) {
              checkExpression(expression);
            }
          });
    } catch (Nodes.UnknownShape e) {
      throw Refused.cannotInspect(e);
    }
    return BoxedUnit.UNIT;
  }

  /**
   * A node resolved from a view-chain catalog (a relation, a write target, a resolved table or identifier:
   * any node whose {@code catalog} field is one) must come from a statement the front door expanded and
   * signed. The check reads the node's origin, the SQL text its parser was given: a name built by
   * IDENTIFIER (comments, parameters, variables), a view body, a CTE or a subquery of a user's own text,
   * and a DataFrame read (no SQL text at all) are refused, however the name was spelled. A relation the
   * signed text resolved keeps that origin under DataFrame operators and in a temporary view made of it.
   */
  private static void chainCatalog(LogicalPlan node, Policy policy, Map<String, Boolean> signed) {
    String catalog = catalogField(node);
    if (catalog == null || !policy.internalCatalog(catalog)) {
      return;
    }
    Object text = Nodes.unwrap(node.origin().sqlText());
    boolean ok = text instanceof String t
        && signed.computeIfAbsent(t, x -> Signature.valid(x, Policy.Engine.current().sqlKey));
    if (!ok) {
      throw Refused.refuse(
          "a table of the engine's view-chain catalogs in a statement the engine did not expand",
          Why.INTERNAL_CATALOG,
          Why.INTERNAL);
    }
  }

  /** The name of the catalog in a node's {@code catalog} field (a CatalogPlugin, or an Option of one), or null. */
  static String catalogField(LogicalPlan node) {
    for (int i = 0; i < node.productArity(); i++) {
      if ("catalog".equals(node.productElementName(i))) {
        Object v = Nodes.unwrap(node.productElement(i));
        return v instanceof CatalogPlugin c ? c.name() : null;
      }
    }
    return null;
  }

  /** USE / SET CATALOG of an ordinary catalog is the way out of an internal one. */
  private boolean leavesCatalog(LogicalPlan plan, Policy policy) {
    String name = Nodes.name(plan);
    if (name.equals("SetCatalogCommand")) {
      return !policy.internalCatalog(Nodes.string(plan, "catalogName"));
    }
    if (name.equals("SetCatalogAndNamespace")) {
      return !policy.internalCatalog(catalogOf(plan.children().head()));
    }
    return false;
  }

  private void checkNode(LogicalPlan node, Policy policy) {
    String name = Nodes.name(node);
    Verdict v = CLASSES.getOrDefault(node.getClass().getName(), NODES.get(name));
    if (v != null) {
      throw Refused.refuse(v.what(), v.rule(), v.why());
    }
    if (Nodes.isA(node, "org.apache.spark.sql.catalyst.plans.logical.ExecutableDuringAnalysis")) {
      throw Refused.refuse("CALL of a stored procedure", Why.PROCEDURES, Why.PROCEDURE);
    }
    switch (name) {
      case "SetCommand" -> Settings.set(node, policy);
      case "ResetCommand" -> Settings.reset(node, policy);
      case "SetCatalogCommand" -> {
        if (policy.internalCatalog(Nodes.string(node, "catalogName"))) {
          throw Refused.refuse("SET CATALOG of an internal catalog", Why.INTERNAL_CATALOG, Why.INTERNAL);
        }
      }
      case "ResolvedNamespace" -> {
        // USE, SHOW TABLES/VIEWS/NAMESPACES IN, DESCRIBE/CREATE/DROP/ALTER NAMESPACE: all name the catalog this way
        if (policy.internalCatalog(catalogOf(node))) {
          throw Refused.refuse(
              "naming an internal catalog (USE, SHOW … IN, namespace commands)", Why.INTERNAL_CATALOG, Why.INTERNAL);
        }
      }
      case "DataSourceV2Relation", "DataSourceV2ScanRelation" -> Tables.relation(node);
      case "CreateViewCommand" -> {
        String type = Nodes.name(Nodes.field(node, "viewType"));
        if (type.equals("GlobalTempView")) {
          throw Refused.refuse("CREATE GLOBAL TEMPORARY VIEW", Why.SHARED_STATE, Why.SHARED);
        }
        if (type.equals("PersistedView")) {
          throw Refused.refuse("a view in the session catalog spark_catalog", Why.SHARED_STATE, Why.SHARED);
        }
      }
      case "View" -> {
        Object desc = Nodes.field(node, "desc");
        String db = Nodes.string(Nodes.field(desc, "identifier"), "database");
        if (db != null && db.equalsIgnoreCase(view.conf().globalTempDatabase())) {
          throw Refused.refuse("a global temporary view", Why.SHARED_STATE, Why.SHARED);
        }
      }
      case "CreateTable", "CreateTableAsSelect", "ReplaceTable", "ReplaceTableAsSelect" -> {
        inSessionCatalog(node, "name");
        Tables.spec(node);
      }
      case "CreateView" -> inSessionCatalog(node, "child");
      case "CreateNamespace" -> {
        inSessionCatalog(node, "name");
        Tables.keys(Nodes.map(node, "properties"), "a namespace LOCATION");
      }
      case "SetNamespaceProperties" -> Tables.keys(Nodes.map(node, "properties"), "a namespace location property");
      case "SetTableProperties", "AlterTableSetPropertiesCommand" ->
          Tables.keys(Nodes.map(node, "properties"), "a table location property");
      case "AddPartitions", "AlterTableAddPartitionCommand" -> Tables.partitions(node);
      default -> {
        if (node.children().isEmpty()
            && Nodes.isA(node, "org.apache.spark.sql.catalyst.analysis.MultiInstanceRelation")
            && !LOCAL_RELATIONS.contains(name)) {
          throw Refused.refuse("the relation " + name, Why.PATH_ACCESS, Why.PATH);
        }
      }
    }
  }

  private void inSessionCatalog(LogicalPlan node, String field) {
    Object target = Nodes.field(node, field);
    if (SESSION_CATALOG.equalsIgnoreCase(catalogOf(target))) {
      throw Refused.refuse("a table, view or namespace in the session catalog spark_catalog", Why.PATH_ACCESS, Why.SESSION_CATALOG);
    }
  }

  /** The catalog named by a resolved identifier/namespace/table node, or null for anything else. */
  static String catalogOf(Object target) {
    if (target instanceof LogicalPlan p) {
      String n = Nodes.name(p);
      if (n.equals("ResolvedIdentifier") || n.equals("ResolvedNamespace") || n.equals("ResolvedTable")
          || n.equals("ResolvedPersistentView")) {
        Object catalog = Nodes.field(p, "catalog");
        return catalog instanceof CatalogPlugin c ? c.name() : null;
      }
    }
    return null;
  }

  private static void checkExpression(Expression e) {
    String name = Nodes.name(e);
    Verdict v = EXPRESSIONS.get(name);
    boolean udf = Nodes.isA(e, "org.apache.spark.sql.catalyst.expressions.UserDefinedExpression")
        || Nodes.isA(e, "org.apache.spark.sql.catalyst.expressions.PythonFuncExpression");
    // ApplyFunctionExpression is a function of a catalog plugin the engine configured (Iceberg's bucket(), …)
    if (v == null && udf && !name.equals("ApplyFunctionExpression")) {
      v = new Verdict(Why.USER_CODE, null, Why.CODE);
    }
    if (v == null) {
      return;
    }
    String what = v.rule().equals(Why.REFLECTION) ? "the function " + e.prettyName() : "the user-defined function " + udfName(e);
    throw Refused.refuse(what, v.rule(), v.why());
  }

  private static String udfName(Expression e) {
    for (String field : new String[] {"name", "udfName"}) {
      try {
        String n = Nodes.string(e, field);
        if (n != null) {
          return n;
        }
      } catch (Nodes.UnknownShape ignored) {
        // try the next field name
      }
    }
    return e.prettyName();
  }

  /** SET / RESET. */
  static final class Settings {
    private Settings() {}

    static void set(LogicalPlan node, Policy policy) {
      Object kv = Nodes.unwrap(Nodes.field(node, "kv"));
      if (kv == null) {
        throw Refused.refuse("SET (listing every setting)", Why.SETTINGS, Why.LIST_KEYS);
      }
      Tuple2<?, ?> pair = (Tuple2<?, ?>) kv;
      String key = String.valueOf(pair._1()).trim();
      Object value = Nodes.unwrap(pair._2());
      if (value == null) {
        if (key.equals("-v")) {
          throw Refused.refuse("SET -v (listing every setting)", Why.SETTINGS, Why.LIST_KEYS);
        }
        if (policy.isProtected(key)) {
          throw Refused.refuse("reading the setting " + key, Why.SETTINGS, Why.READ_KEY);
        }
        return;
      }
      if (!policy.settable(key)) {
        throw Refused.refuse("SET " + key, Why.SETTINGS, Why.SET_KEY);
      }
    }

    static void reset(LogicalPlan node, Policy policy) {
      String key = Nodes.string(node, "config");
      if (key == null) {
        throw Refused.refuse("RESET (every setting)", Why.SETTINGS, Why.RESET_ALL);
      }
      if (!policy.settable(key)) {
        throw Refused.refuse("RESET " + key.trim(), Why.SETTINGS, Why.SET_KEY);
      }
    }
  }

  /** Relations, table specs and table properties. */
  static final class Tables {
    private Tables() {}

    static void relation(LogicalPlan node) {
      if (Nodes.name(node).equals("DataSourceV2ScanRelation")) {
        return; // its `relation` field is a DataSourceV2Relation, walked and checked on its own
      }
      Object table = Nodes.field(node, "table");
      if (Nodes.name(table).equals("RowLevelOperationTable")) {
        table = Nodes.field(table, "table");
      }
      String cls = table.getClass().getName();
      if (cls.startsWith("org.apache.spark.sql.execution.datasources.v2.python.")) {
        throw Refused.refuse("a Python data source", Why.USER_CODE, Why.CODE);
      }
      if (!cls.startsWith("org.apache.iceberg.")) {
        throw Refused.refuse("the data source " + Nodes.name(table), Why.PATH_ACCESS, Why.PATH);
      }
      Object catalog = Nodes.unwrap(Nodes.field(node, "catalog"));
      Object ident = Nodes.unwrap(Nodes.field(node, "identifier"));
      if (catalog == null || ident == null || Nodes.name(ident).endsWith("PathIdentifier")) {
        throw Refused.refuse("an Iceberg table loaded by path", Why.PATH_ACCESS, Why.PATH);
      }
    }

    /** CREATE/REPLACE TABLE [AS SELECT]: LOCATION, OPTIONS (path …), TBLPROPERTIES naming a location. */
    static void spec(LogicalPlan node) {
      Object spec = Nodes.field(node, "tableSpec");
      if (Nodes.string(spec, "location") != null) {
        throw Refused.refuse("CREATE/REPLACE TABLE … LOCATION", Why.PATH_ACCESS, Why.LOCATION);
      }
      keys(Nodes.map(spec, "properties"), "a table location property");
      if (!Nodes.name(spec).equals("UnresolvedTableSpec")) { // its options are still expressions
        keys(Nodes.map(spec, "options"), "a table path option");
      }
      if (Nodes.name(node).endsWith("AsSelect")) {
        keys(Nodes.map(node, "writeOptions"), "a table path option");
      }
    }

    static void keys(Map<String, String> entries, String what) {
      for (String key : entries.keySet()) {
        if (LOCATION_KEY.matcher(key.trim()).find()) {
          throw Refused.refuse(what + " (" + key.trim() + ")", Why.PATH_ACCESS, Why.LOCATION);
        }
      }
    }

    static void partitions(LogicalPlan node) {
      String field = Nodes.name(node).equals("AddPartitions") ? "parts" : "partitionSpecsAndLocs";
      Object parts = Nodes.field(node, field);
      if (parts instanceof scala.collection.Iterable<?> it) {
        scala.collection.Iterator<?> i = it.iterator();
        while (i.hasNext()) {
          Object part = i.next();
          Object location = part instanceof Tuple2<?, ?> t ? Nodes.unwrap(t._2()) : Nodes.unwrap(Nodes.field(part, "location"));
          if (location != null) {
            throw Refused.refuse("ALTER TABLE … ADD PARTITION … LOCATION", Why.PATH_ACCESS, Why.LOCATION);
          }
        }
      }
    }
  }
}
