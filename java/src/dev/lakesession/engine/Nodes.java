package dev.lakesession.engine;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Deque;
import java.util.IdentityHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.PlanExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import scala.Option;
import scala.Product;

/**
 * Reading Catalyst trees by name: the sandbox matches nodes by class name and reads their fields by
 * the case-class field name ({@link Product#productElementName}), so a field Spark renames makes a
 * check fail closed ({@link #field} throws) instead of failing to compile or silently passing.
 */
final class Nodes {
  /** A field a check needs is missing: the node's shape is not the one the check was written for. */
  static final class UnknownShape extends RuntimeException {
    private static final long serialVersionUID = 1L;

    UnknownShape(String message) {
      super(message);
    }
  }

  private static final Map<Class<?>, Set<String>> TYPES = new ConcurrentHashMap<>();
  /**
   * Commands whose statement Spark analyses afresh when they run (EXPLAIN, DESCRIBE QUERY): their
   * still unresolved statement field is not entered, the sandbox checks it in that analysis.
   */
  private static final Set<String> ANALYSED_WHEN_RUN = Set.of("ExplainCommand", "DescribeQueryCommand");

  private Nodes() {}

  /** The class's simple name without Scala's {@code $} suffix of objects. */
  static String name(Object node) {
    String n = node.getClass().getSimpleName();
    return n.endsWith("$") ? n.substring(0, n.length() - 1) : n;
  }

  /** Every class and interface name {@code node} is an instance of (cached per class). */
  static Set<String> types(Object node) {
    return TYPES.computeIfAbsent(node.getClass(), Nodes::collect);
  }

  static boolean isA(Object node, String className) {
    return node != null && types(node).contains(className);
  }

  static boolean isAssignable(Class<?> cls, String className) {
    return TYPES.computeIfAbsent(cls, Nodes::collect).contains(className);
  }

  private static Set<String> collect(Class<?> cls) {
    Set<String> out = new LinkedHashSet<>();
    Deque<Class<?>> todo = new ArrayDeque<>();
    todo.add(cls);
    while (!todo.isEmpty()) {
      Class<?> c = todo.poll();
      if (!out.add(c.getName())) {
        continue;
      }
      if (c.getSuperclass() != null) {
        todo.add(c.getSuperclass());
      }
      Collections.addAll(todo, c.getInterfaces());
    }
    return Collections.unmodifiableSet(out);
  }

  /** The case-class field {@code name} of {@code node}; {@link UnknownShape} if it has none. */
  static Object field(Object node, String name) {
    if (node instanceof Product p) {
      for (int i = 0; i < p.productArity(); i++) {
        if (name.equals(p.productElementName(i))) {
          return p.productElement(i);
        }
      }
    }
    throw new UnknownShape(name(node) + " has no field " + name);
  }

  /** {@code Some(x)} as {@code x}, {@code None} as null, anything else as itself. */
  static Object unwrap(Object value) {
    if (value instanceof Option<?> o) {
      return o.isDefined() ? o.get() : null;
    }
    return value;
  }

  /** A field that is a String or an Option of one (null when absent). */
  static String string(Object node, String name) {
    Object v = unwrap(field(node, name));
    return v == null ? null : v.toString();
  }

  /** The string elements of a Scala {@code Seq[String]} field. */
  static List<String> strings(Object node, String name) {
    List<String> out = new ArrayList<>();
    Object v = unwrap(field(node, name));
    if (v instanceof scala.collection.Iterable<?> it) {
      scala.collection.Iterator<?> i = it.iterator();
      while (i.hasNext()) {
        out.add(String.valueOf(i.next()));
      }
    }
    return out;
  }

  /** Entries of a map-valued field: a Scala Map, a java.util.Map (CaseInsensitiveStringMap) or an Option of one. */
  static Map<String, String> map(Object node, String name) {
    return asMap(unwrap(field(node, name)));
  }

  static Map<String, String> asMap(Object v) {
    Map<String, String> out = new java.util.LinkedHashMap<>();
    if (v instanceof scala.collection.Map<?, ?> m) {
      scala.collection.Iterator<?> i = m.iterator();
      while (i.hasNext()) {
        scala.Tuple2<?, ?> kv = (scala.Tuple2<?, ?>) i.next();
        out.put(String.valueOf(kv._1()), String.valueOf(kv._2()));
      }
    } else if (v instanceof Map<?, ?> m) {
      m.forEach((k, val) -> out.put(String.valueOf(k), String.valueOf(val)));
    }
    return out;
  }

  /** What a check does with each plan node and each expression it meets. */
  interface Visitor {
    void plan(LogicalPlan plan);

    void expression(Expression expression);
  }

  /**
   * Visits every plan node reachable from {@code root}: children, inner children (analysed view and
   * CACHE bodies), plan-valued fields that are not children (a write's target table, an EXPLAIN's
   * statement, a command's query), and the plans of subquery expressions; and every expression of
   * each. A {@code CommandResult} (a command that already ran, kept as a result) is not entered.
   */
  static void walk(LogicalPlan root, Visitor visitor) {
    Set<Object> seen = Collections.newSetFromMap(new IdentityHashMap<>());
    Deque<LogicalPlan> plans = new ArrayDeque<>();
    plans.push(root);
    while (!plans.isEmpty()) {
      LogicalPlan plan = plans.pop();
      if (!seen.add(plan)) {
        continue;
      }
      visitor.plan(plan);
      if ("CommandResult".equals(name(plan))) {
        continue;
      }
      walkExpressions(plan, visitor, plans, seen);
      addPlans(plan.children(), plans, true);
      addPlans(plan.innerChildren(), plans, true);
      if (!ANALYSED_WHEN_RUN.contains(name(plan))) {
        for (int i = 0; i < plan.productArity(); i++) {
          addPlans(plan.productElement(i), plans, false);
        }
      }
    }
  }

  private static void walkExpressions(LogicalPlan plan, Visitor visitor, Deque<LogicalPlan> plans, Set<Object> seen) {
    Deque<Expression> todo = new ArrayDeque<>();
    scala.collection.Iterator<Expression> top = plan.expressions().iterator();
    while (top.hasNext()) {
      todo.push(top.next());
    }
    while (!todo.isEmpty()) {
      Expression e = todo.pop();
      if (!seen.add(e)) {
        continue;
      }
      visitor.expression(e);
      if (e instanceof PlanExpression<?> pe && pe.plan() instanceof LogicalPlan sub) {
        plans.push(sub);
      }
      scala.collection.Iterator<Expression> kids = e.children().iterator();
      while (kids.hasNext()) {
        todo.push(kids.next());
      }
    }
  }

  /**
   * Pushes a plan, or the plans in an Option, a pair or a Scala collection of them. Unless {@code
   * all} (children, inner children: short lists), a collection is entered only if its first element
   * is a plan or a pair holding one, so a LocalRelation's rows are never iterated.
   */
  private static void addPlans(Object value, Deque<LogicalPlan> plans, boolean all) {
    Object v = unwrap(value);
    if (v instanceof LogicalPlan p) {
      plans.push(p);
    } else if (v instanceof scala.Tuple2<?, ?> t) {
      addPlans(t._1(), plans, false);
      addPlans(t._2(), plans, false);
    } else if (v instanceof scala.collection.Iterable<?> it && !(v instanceof scala.collection.Map<?, ?>) && it.nonEmpty()) {
      if (!all && !holdsPlan(it.head())) {
        return;
      }
      scala.collection.Iterator<?> i = it.iterator();
      while (i.hasNext()) {
        Object e = i.next();
        if (holdsPlan(e)) {
          addPlans(e, plans, false);
        }
      }
    }
  }

  private static boolean holdsPlan(Object e) {
    return e instanceof LogicalPlan
        || (e instanceof scala.Tuple2<?, ?> t && (unwrap(t._1()) instanceof LogicalPlan || unwrap(t._2()) instanceof LogicalPlan));
  }

}
