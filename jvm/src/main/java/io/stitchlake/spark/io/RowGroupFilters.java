package io.stitchlake.spark.io;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.stitchlake.spark.plan.Plan;
import java.math.BigDecimal;
import java.time.Instant;
import java.time.LocalDate;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.apache.parquet.filter2.predicate.FilterApi;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.parquet.filter2.predicate.Operators;
import org.apache.parquet.io.api.Binary;
import org.apache.spark.sql.catalyst.util.DateTimeUtils$;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.IsNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;

/**
 * Spark's pushed filters in two forms: the planner's JSON (docs/spark-reader.md, {@code filters}) and a Parquet
 * row-group predicate. Over key and partition columns it may skip row groups of any file: every version of a key
 * carries the key, so a row group without it holds nothing of it (stream columns are filtered after the merge).
 * Over the value columns too ({@link #shownColumns}) it may skip row groups of a base file whose every row shows
 * every stream (its delete flags all false): there the stored values are the values a read shows.
 */
public final class RowGroupFilters {
  private RowGroupFilters() {}

  /** The filter's column and its one-column simple form, or null for one the protocol does not carry. */
  private static String column(Filter f) {
    if (f instanceof EqualTo) return ((EqualTo) f).attribute();
    if (f instanceof EqualNullSafe) return ((EqualNullSafe) f).attribute();
    if (f instanceof In) return ((In) f).attribute();
    if (f instanceof LessThan) return ((LessThan) f).attribute();
    if (f instanceof LessThanOrEqual) return ((LessThanOrEqual) f).attribute();
    if (f instanceof GreaterThan) return ((GreaterThan) f).attribute();
    if (f instanceof GreaterThanOrEqual) return ((GreaterThanOrEqual) f).attribute();
    if (f instanceof IsNull) return ((IsNull) f).attribute();
    if (f instanceof IsNotNull) return ((IsNotNull) f).attribute();
    return null;
  }

  /** The filters the planner understands, as its JSON list (the others stay Spark's to evaluate). */
  public static ArrayNode toJson(Filter[] filters) {
    ArrayNode out = Plan.JSON.createArrayNode();
    for (Filter f : filters) {
      String column = column(f);
      if (column == null) continue;
      ObjectNode node = out.addObject();
      if (f instanceof EqualTo || f instanceof EqualNullSafe) {
        Object v = f instanceof EqualTo ? ((EqualTo) f).value() : ((EqualNullSafe) f).value();
        node.put("op", v == null ? "is_null" : "eq").put("column", column);
        if (v != null) node.set("value", Plan.JSON.valueToTree(json(v)));
      } else if (f instanceof In) {
        node.put("op", "in").put("column", column);
        ArrayNode values = node.putArray("values");
        for (Object v : ((In) f).values()) values.add(Plan.JSON.valueToTree(json(v)));
      } else if (f instanceof IsNull || f instanceof IsNotNull) {
        node.put("op", f instanceof IsNull ? "is_null" : "is_not_null").put("column", column);
      } else {
        String op = f instanceof LessThan ? "lt" : f instanceof LessThanOrEqual ? "le"
            : f instanceof GreaterThan ? "gt" : "ge";
        Object v = f instanceof LessThan ? ((LessThan) f).value() : f instanceof LessThanOrEqual
            ? ((LessThanOrEqual) f).value() : f instanceof GreaterThan ? ((GreaterThan) f).value()
            : ((GreaterThanOrEqual) f).value();
        node.put("op", op).put("column", column).set("value", Plan.JSON.valueToTree(json(v)));
      }
    }
    return out;
  }

  private static Object json(Object v) {
    if (v instanceof java.sql.Date) return ((java.sql.Date) v).toLocalDate().toString();
    if (v instanceof LocalDate) return v.toString();
    if (v instanceof java.sql.Timestamp) return ((java.sql.Timestamp) v).toInstant().toString();
    if (v instanceof Instant) return v.toString();
    if (v instanceof BigDecimal) return v.toString();
    return v;
  }

  /**
   * The columns whose statistics may skip row groups of a base file whose rows show every stream: every column but
   * floats and doubles, whose statistics leave NaN out although Spark orders NaN above every number.
   */
  public static Set<String> shownColumns(StructType schema) {
    Set<String> out = new HashSet<>();
    for (var field : schema.fields()) {
      DataType type = field.dataType();
      if (!(type instanceof FloatType) && !(type instanceof DoubleType)) out.add(field.name());
    }
    return out;
  }

  /** The filters (by position) that make a row-group predicate: the others are left to Spark and the merge. */
  public static List<Integer> usable(Filter[] filters, StructType schema, Set<String> keyColumns) {
    List<Integer> out = new ArrayList<>();
    for (int i = 0; i < filters.length; i++) {
      String column = column(filters[i]);
      if (column != null && keyColumns.contains(column) && predicate(filters[i], schema) != null) out.add(i);
    }
    return out;
  }

  /** The columns of the usable filters (a file lacking one is read whole). */
  public static Set<String> columns(Filter[] filters, StructType schema, Set<String> keyColumns) {
    Set<String> out = new HashSet<>();
    for (int i : usable(filters, schema, keyColumns)) out.add(column(filters[i]));
    return out;
  }

  /** The conjunction of the usable filters' predicates, or null. */
  public static FilterPredicate predicate(Filter[] filters, StructType schema, Set<String> keyColumns) {
    FilterPredicate out = null;
    for (int i : usable(filters, schema, keyColumns)) {
      FilterPredicate p = predicate(filters[i], schema);
      out = out == null ? p : FilterApi.and(out, p);
    }
    return out;
  }

  private static FilterPredicate predicate(Filter f, StructType schema) {
    String name = column(f);
    if (name == null || schema.getFieldIndex(name).isEmpty()) return null;
    DataType type = schema.apply(name).dataType();
    try {
      if (type instanceof IntegerType || type instanceof DateType) return compare(FilterApi.intColumn(name), f, type);
      if (type instanceof LongType || type instanceof TimestampType) {
        return compare(FilterApi.longColumn(name), f, type);
      }
      if (type instanceof StringType) return compare(FilterApi.binaryColumn(name), f, type);
      if (type instanceof DoubleType) return compare(FilterApi.doubleColumn(name), f, type);
      if (type instanceof FloatType) return compare(FilterApi.floatColumn(name), f, type);
      if (type instanceof BooleanType) return equality(FilterApi.booleanColumn(name), f, type);
    } catch (IllegalArgumentException | ClassCastException e) {
      return null; // a value of another type: Spark evaluates it
    }
    return null;
  }

  @SuppressWarnings("unchecked")
  private static <T extends Comparable<T>, C extends Operators.Column<T> & Operators.SupportsEqNotEq>
      FilterPredicate equality(C col, Filter f, DataType type) {
    if (f instanceof IsNull) return FilterApi.eq(col, (T) null);
    if (f instanceof IsNotNull) return FilterApi.notEq(col, (T) null);
    if (f instanceof EqualTo) return FilterApi.eq(col, (T) value(((EqualTo) f).value(), type));
    if (f instanceof EqualNullSafe) return FilterApi.eq(col, (T) value(((EqualNullSafe) f).value(), type));
    if (f instanceof In) {
      Set<T> values = new LinkedHashSet<>();
      for (Object v : ((In) f).values()) values.add((T) value(v, type));
      if (values.contains(null) || values.isEmpty()) return null;
      return FilterApi.in(col, values);
    }
    return null;
  }

  @SuppressWarnings("unchecked")
  private static <T extends Comparable<T>, C extends Operators.Column<T> & Operators.SupportsLtGt>
      FilterPredicate compare(C col, Filter f, DataType type) {
    if (f instanceof LessThan) return FilterApi.lt(col, (T) value(((LessThan) f).value(), type));
    if (f instanceof LessThanOrEqual) return FilterApi.ltEq(col, (T) value(((LessThanOrEqual) f).value(), type));
    if (f instanceof GreaterThan) return FilterApi.gt(col, (T) value(((GreaterThan) f).value(), type));
    if (f instanceof GreaterThanOrEqual) {
      return FilterApi.gtEq(col, (T) value(((GreaterThanOrEqual) f).value(), type));
    }
    return equality(col, f, type);
  }

  private static Comparable<?> value(Object v, DataType type) {
    if (v == null) return null;
    if (type instanceof IntegerType) return ((Number) v).intValue();
    if (type instanceof LongType) return ((Number) v).longValue();
    if (type instanceof DoubleType) return ((Number) v).doubleValue();
    if (type instanceof FloatType) return ((Number) v).floatValue();
    if (type instanceof BooleanType) return (Boolean) v;
    if (type instanceof StringType) return Binary.fromString(v.toString());
    if (type instanceof DateType) {
      LocalDate d = v instanceof java.sql.Date ? ((java.sql.Date) v).toLocalDate() : (LocalDate) v;
      return (int) d.toEpochDay();
    }
    if (type instanceof TimestampType) {
      // Spark hands a java.sql.Timestamp rebased onto the Julian calendar (its toJavaTimestamp): undone as Spark's
      // own Parquet filters undo it, or instants before 1582 would be days off.
      if (v instanceof java.sql.Timestamp) return DateTimeUtils$.MODULE$.fromJavaTimestamp((java.sql.Timestamp) v);
      return ChronoUnit.MICROS.between(Instant.EPOCH, (Instant) v);
    }
    throw new IllegalArgumentException("no row-group value for " + type);
  }
}
