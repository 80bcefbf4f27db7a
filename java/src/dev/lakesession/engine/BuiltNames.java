package dev.lakesession.engine;

import java.util.List;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

/**
 * Names built at run time ({@code IDENTIFIER(expr)} of a table or a function, with literals, parameters or
 * session variables), checked the moment their value is known: a rule of the analyzer's resolution batch.
 * It runs at the end of each of the batch's iterations: after Spark's {@code ResolveIdentifierClause} turned
 * a built function name into an {@code UnresolvedFunction}, before the next iteration's {@code
 * ResolveFunctions} resolves it (and, for an {@code expr} still being resolved, on its value). A function
 * name whose catalog is a view-chain catalog is refused, whoever wrote it.
 *
 * <p>Tables are checked again after analysis, by catalog ({@link PlanChecks}); functions must be caught here:
 * once resolved, a function no longer says which catalog it came from. A signed statement builds no names
 * ({@link SandboxParser}), so none is exempt. The rule never changes the plan.
 */
final class BuiltNames extends Rule<LogicalPlan> {
  private static final String PLAN = "PlanWithUnresolvedIdentifier";
  private static final String EXPRESSION = "ExpressionWithUnresolvedIdentifier";
  /** What Spark's ResolveIdentifierClause made of a function's built name, before ResolveFunctions resolves it. */
  private static final String FUNCTION = "UnresolvedFunction";

  private final SessionView view;

  BuiltNames(SessionView view) {
    this.view = view;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    Policy policy = view.policy();
    if (!policy.sandbox) {
      return plan;
    }
    try {
      Nodes.walk(
          plan,
          new Nodes.Visitor() {
            @Override
            public void plan(LogicalPlan node) {
              if (PLAN.equals(Nodes.name(node))) {
                check(Nodes.field(node, "identifierExpr"), policy);
              }
            }

            @Override
            public void expression(Expression expression) {
              String name = Nodes.name(expression);
              if (EXPRESSION.equals(name)) {
                check(Nodes.field(expression, "identifierExpr"), policy);
              } else if (FUNCTION.equals(name)) {
                List<String> parts = Nodes.strings(expression, "nameParts");
                if (parts.size() > 1 && policy.internalCatalog(parts.get(0))) {
                  throw Refused.refuse("a function of the engine's view-chain catalogs", Why.INTERNAL_CATALOG, Why.INTERNAL);
                }
              }
            }
          });
    } catch (Nodes.UnknownShape e) {
      throw Refused.cannotInspect(e);
    }
    return plan;
  }

  /** The name's value, once Spark could compute it (resolved and foldable, as Spark itself requires). */
  private static void check(Object identifier, Policy policy) {
    if (!(identifier instanceof Expression e) || !e.resolved() || !e.foldable()) {
      return;
    }
    Object value;
    try {
      value = e.eval(null);
    } catch (RuntimeException ex) {
      return; // Spark evaluates it next and reports the same error
    }
    if (value != null && policy.mentionsInternal(value.toString())) {
      throw Refused.refuse("a name built at run time naming the engine's view-chain catalogs", Why.INTERNAL_CATALOG,
          Why.INTERNAL);
    }
  }
}
