package dev.lakesession.engine;

import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.collection.immutable.Seq;

/**
 * Wraps Spark's SQL parser for what no plan shows: the text before parsing, and SQL scripts.
 *
 * <ul>
 *   <li>{@code ${key}}, {@code ${env:NAME}}, {@code ${system:name}} are replaced by Spark's parser
 *       with settings, environment variables and system properties <em>before</em> parsing (when
 *       {@code spark.sql.variable.substitute} is on, its default): the plan holds only the
 *       substituted value. Refused under rule {@code settings} in every parser entry point
 *       (statements, {@code expr()} strings, identifiers, schemas, view bodies).
 *   <li>The engine's view-chain catalogs may be named only by a statement the front door expanded and
 *       signed ({@link Signature}): any other statement, and every expression or identifier string
 *       naming one, is refused under rule {@code internal-catalog}.
 *   <li>SQL scripts ({@code BEGIN … END}) never reach the analyzer as a whole (Spark runs them
 *       statement by statement); refused under rule {@code dynamic-sql}.
 * </ul>
 *
 * Everything else is the delegate's. It must be the outermost parser (the last entry of {@code
 * spark.sql.extensions}); {@link SessionView#requireIntact} refuses every statement otherwise.
 */
final class SandboxParser implements ParserInterface {
  private final SessionView view;
  private final ParserInterface delegate;

  SandboxParser(SessionView view, ParserInterface delegate) {
    this.view = view;
    this.delegate = delegate;
  }

  private void text(String sql) {
    if (sql != null && sql.contains("${") && view.policy().sandbox && view.conf().variableSubstituteEnabled()) {
      throw Refused.refuse("${...} substitution in SQL text", Why.SETTINGS, Why.SUBSTITUTION);
    }
  }

  /**
   * A whole statement: it may name an internal catalog only when the front door signed it. Returns whether
   * it is signed (its relations from view-chain catalogs are then allowed after analysis: PlanChecks).
   */
  private boolean statement(String sql) {
    text(sql);
    Policy policy = view.policy();
    if (!policy.sandbox) {
      return false;
    }
    boolean signed = Signature.valid(sql, Policy.Engine.current().sqlKey);
    if (!signed && policy.mentionsInternal(sql)) {
      throw Refused.refuse("a statement naming the engine's view-chain catalogs", Why.INTERNAL_CATALOG, Why.INTERNAL);
    }
    return signed;
  }

  /**
   * A signed statement builds no name at run time: its relations may come from view-chain catalogs, so a
   * name decided by a parameter or variable (IDENTIFIER) would reach any of them. The front door never
   * signs such a text; this holds even if it did.
   */
  private static LogicalPlan fixedNames(LogicalPlan plan) {
    Nodes.walk(
        plan,
        new Nodes.Visitor() {
          @Override
          public void plan(LogicalPlan node) {
            if (BUILT.contains(Nodes.name(node))) {
              throw Refused.refuse("a signed statement that builds a name at run time", Why.DYNAMIC_SQL, Why.DYNAMIC);
            }
          }

          @Override
          public void expression(Expression expression) {
            if (BUILT.contains(Nodes.name(expression))) {
              throw Refused.refuse("a signed statement that builds a name at run time", Why.DYNAMIC_SQL, Why.DYNAMIC);
            }
          }
        });
    return plan;
  }

  private static final java.util.Set<String> BUILT =
      java.util.Set.of("PlanWithUnresolvedIdentifier", "ExpressionWithUnresolvedIdentifier", "UnresolvedExecuteImmediate");

  /** A fragment (expression, identifier, schema): never signed, so it may not name an internal catalog. */
  private void fragment(String sql) {
    text(sql);
    Policy policy = view.policy();
    if (policy.sandbox && policy.mentionsInternal(sql)) {
      throw Refused.refuse("a name of the engine's view-chain catalogs", Why.INTERNAL_CATALOG, Why.INTERNAL);
    }
  }

  private LogicalPlan script(LogicalPlan plan) {
    if (Nodes.isA(plan, "org.apache.spark.sql.catalyst.plans.logical.CompoundPlanStatement") && view.policy().sandbox) {
      throw Refused.refuse("a SQL script (BEGIN … END)", Why.DYNAMIC_SQL, Why.DYNAMIC);
    }
    return plan;
  }

  @Override
  public LogicalPlan parsePlan(String sqlText) throws ParseException {
    boolean signed = statement(sqlText);
    LogicalPlan plan = script(delegate.parsePlan(sqlText));
    return signed ? fixedNames(plan) : plan;
  }

  @Override
  public LogicalPlan parsePlanWithParameters(String sqlText, ParameterContext parameterContext) throws ParseException {
    boolean signed = statement(sqlText);
    LogicalPlan plan = script(delegate.parsePlanWithParameters(sqlText, parameterContext));
    return signed ? fixedNames(plan) : plan;
  }

  @Override
  public Expression parseExpression(String sqlText) throws ParseException {
    fragment(sqlText);
    return delegate.parseExpression(sqlText);
  }

  @Override
  public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
    fragment(sqlText);
    return delegate.parseTableIdentifier(sqlText);
  }

  @Override
  public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
    fragment(sqlText);
    return delegate.parseFunctionIdentifier(sqlText);
  }

  @Override
  public Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
    fragment(sqlText);
    return delegate.parseMultipartIdentifier(sqlText);
  }

  @Override
  public LogicalPlan parseQuery(String sqlText) throws ParseException {
    boolean signed = statement(sqlText);
    LogicalPlan plan = delegate.parseQuery(sqlText);
    return signed ? fixedNames(plan) : plan;
  }

  @Override
  public StructType parseRoutineParam(String sqlText) throws ParseException {
    text(sqlText);
    return delegate.parseRoutineParam(sqlText);
  }

  @Override
  public StructType parseTableSchema(String sqlText) throws ParseException {
    text(sqlText);
    return delegate.parseTableSchema(sqlText);
  }

  @Override
  public DataType parseDataType(String sqlText) throws ParseException {
    text(sqlText);
    return delegate.parseDataType(sqlText);
  }
}
