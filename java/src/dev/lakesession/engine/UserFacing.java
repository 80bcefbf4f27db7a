package dev.lakesession.engine;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StringType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * What a user's statement answers about who and where they are, as a rule of the analyzer's post-hoc
 * resolution batch (after resolution, before the check rules and before the optimizer's {@code
 * ReplaceCurrentLike}):
 *
 * <ul>
 *   <li>{@code current_user()}, {@code session_user()}, {@code user()} become the user the front door
 *       named for the session ({@code spark.lakesession.engine.user}; the engine's OS account otherwise), in every subquery and
 *       in the engine's expansion of DEFINER views (their SQL is part of the user's statement);
 *   <li>{@code SHOW CATALOGS} and {@code spark.catalog.listCatalogs()} leave out the engine's view-chain
 *       catalogs (a session lists the catalogs it loaded, chain catalogs included).
 * </ul>
 */
final class UserFacing extends Rule<LogicalPlan> {
  /** The session's authenticated user: set by the front door, never settable or readable by a user. */
  static final String USER = Rulebook.string("session_user_conf");

  private final SessionView view;

  UserFacing(SessionView view) {
    this.view = view;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    Policy policy = view.policy();
    if (!policy.sandbox) {
      return plan;
    }
    String user = view.conf().getConfString(USER, "").trim();
    LogicalPlan out = user.isEmpty() ? plan : plan.transformAllExpressionsWithSubqueries(new AsUser(user));
    return out.transformUpWithSubqueries(new Catalogs(policy));
  }

  /** CurrentUser (current_user, session_user, user) -> the session's user. */
  private static final class AsUser extends AbstractPartialFunction<Expression, Expression> {
    private final Expression literal;

    AsUser(String user) {
      literal = Literal$.MODULE$.apply(user);
    }

    @Override
    public boolean isDefinedAt(Expression e) {
      return "CurrentUser".equals(Nodes.name(e));
    }

    @Override
    public Expression apply(Expression e) {
      return literal;
    }
  }

  /** SHOW CATALOGS and listCatalogs without the view-chain catalogs. */
  private final class Catalogs extends AbstractPartialFunction<LogicalPlan, LogicalPlan> {
    private final Policy policy;

    Catalogs(Policy policy) {
      this.policy = policy;
    }

    @Override
    public boolean isDefinedAt(LogicalPlan p) {
      String name = Nodes.name(p);
      return name.equals("ShowCatalogsCommand") || (name.equals("LocalRelation") && isCatalogList(p));
    }

    @Override
    public LogicalPlan apply(LogicalPlan p) {
      if (Nodes.name(p).equals("ShowCatalogsCommand")) {
        Option<?> pattern = (Option<?>) Nodes.field(p, "pattern");
        Object given = Nodes.unwrap(pattern);
        Option<String> like = given == null ? Option.empty() : Option.apply(given.toString());
        List<InternalRow> rows = new ArrayList<>();
        for (String n : CollectionConverters.asJava(view.listCatalogs(like))) {
          if (!policy.internalCatalog(n)) {
            rows.add(new GenericInternalRow(new Object[] {Literal$.MODULE$.apply(n).value()}));
          }
        }
        return local(p.output(), rows);
      }
      LocalRelation relation = (LocalRelation) p;
      List<InternalRow> rows = new ArrayList<>();
      for (InternalRow row : CollectionConverters.asJava(relation.data())) {
        if (row.isNullAt(0) || !policy.internalCatalog(String.valueOf(row.get(0, DataTypes.StringType)))) {
          rows.add(row);
        }
      }
      return relation.copy(relation.output(), CollectionConverters.asScala(rows).toSeq(), relation.isStreaming(),
          relation.stream());
    }

    /** listCatalogs' relation: exactly (name STRING, description STRING), some name an internal catalog. */
    private boolean isCatalogList(LogicalPlan p) {
      List<Attribute> out = CollectionConverters.asJava(p.output());
      if (out.size() != 2 || !out.get(0).name().equals("name") || !out.get(1).name().equals("description")
          || !(out.get(0).dataType() instanceof StringType)) {
        return false;
      }
      for (InternalRow row : CollectionConverters.asJava(((LocalRelation) p).data())) {
        if (!row.isNullAt(0) && policy.internalCatalog(String.valueOf(row.get(0, DataTypes.StringType)))) {
          return true;
        }
      }
      return false;
    }
  }

  private static LogicalPlan local(scala.collection.immutable.Seq<Attribute> output, List<InternalRow> rows) {
    return new LocalRelation(output, CollectionConverters.asScala(rows).toSeq(), false, Option.empty());
  }
}
