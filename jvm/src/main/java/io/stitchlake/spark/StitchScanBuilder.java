package io.stitchlake.spark;

import com.fasterxml.jackson.databind.node.ArrayNode;
import io.stitchlake.spark.io.RowGroupFilters;
import io.stitchlake.spark.plan.Plan;
import io.stitchlake.spark.plan.PlanSlice;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Column pruning and filters for the planner: the read is planned here (the plan says which filters pruned slices),
 * so the scan's description and pushed filters are the plan's. Every filter is still evaluated by Spark after the
 * scan: key and partition filters only skip slices and row groups, and stream columns are filtered after the merge.
 */
public final class StitchScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
  private static final String PLAN = StitchSource.PLAN_OPTION;
  /** Options Spark's catalog adds to a table's, which the planner has no use for. */
  private static final Set<String> NOT_FOR_THE_PLANNER = Set.of("provider", "owner", "location", PLAN, "external");

  private final StructType schema;
  private final Map<String, String> options;
  private StructType required;
  private Filter[] filters = new Filter[0];
  private Filter[] pushed = new Filter[0];

  StitchScanBuilder(StructType schema, Map<String, String> options) {
    this.schema = schema;
    this.options = options;
    this.required = schema;
  }

  /**
   * Only whole columns are pruned: a struct Spark narrowed to the fields a query reads (nested schema pruning, on by
   * default) is merged and read whole, and Spark projects the fields out (the API allows pruning partly). Narrowed,
   * it failed the declared-type check, and the merged vectors would not have had its shape.
   */
  @Override
  public void pruneColumns(StructType requiredSchema) {
    StructField[] fields = requiredSchema.fields().clone();
    for (int i = 0; i < fields.length; i++) {
      scala.Option<Object> at = schema.getFieldIndex(fields[i].name());
      if (at.isDefined()) fields[i] = schema.fields()[(Integer) at.get()];
    }
    required = new StructType(fields);
  }

  @Override
  public Filter[] pushFilters(Filter[] given) {
    filters = given;
    return given;
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed;
  }

  /** The options as the planner takes them: the read's own, with a catalog table's path as a plain path. */
  static Map<String, String> plannerOptions(Map<String, String> options) {
    Map<String, String> out = new HashMap<>();
    options.forEach((k, v) -> {
      if (!NOT_FOR_THE_PLANNER.contains(k) && !k.startsWith("option.") && !k.startsWith("__") && v != null) {
        out.put(k, v);
      }
    });
    String path = out.get("path");
    if (path != null && path.startsWith("file:")) out.put("path", new org.apache.hadoop.fs.Path(path).toUri().getPath());
    return out;
  }

  /** The session's packing settings, for a read whose options give none. */
  static Map<String, String> packing() {
    SQLConf conf = SQLConf.get();
    Map<String, String> out = new HashMap<>();
    out.put("maxpartitionbytes", conf.getConfString("spark.sql.files.maxPartitionBytes", "134217728"));
    out.put("opencostinbytes", conf.getConfString("spark.sql.files.openCostInBytes", "4194304"));
    // Its registered default is "None"; asking with another default is refused as a type mismatch, so test it set.
    String min = conf.contains("spark.sql.files.minPartitionNum")
        ? conf.getConfString("spark.sql.files.minPartitionNum") : "";
    if (min.isEmpty()) {
      try {
        min = String.valueOf(SparkSession.active().sparkContext().defaultParallelism());
      } catch (RuntimeException e) {
        min = "1";
      }
    }
    out.put("minpartitions", min);
    return out;
  }

  @Override
  public Scan build() {
    Map<String, String> planner = plannerOptions(options);
    List<String> columns = List.of(required.fieldNames());
    ArrayNode json = RowGroupFilters.toJson(filters);
    Plan plan = options.containsKey(PLAN)
        ? Plan.load(options.get(PLAN))
        : PlannerClient.get().plan(planner, columns, json, packing());
    if (plan.delegate != null && !plan.delegate.isEmpty()) {
      TableProvider python = StitchSource.python(plan.delegate);
      Table table = python.getTable(schema, new Transform[0], options);
      return ((org.apache.spark.sql.connector.catalog.SupportsRead) table)
          .newScanBuilder(new CaseInsensitiveStringMap(options))
          .build();
    }
    Set<String> keys = new LinkedHashSet<>(plan.merge == null ? List.of() : plan.merge.common);
    StructType tableSchema = plan.schemaJson != null ? plan.schema() : schema;
    checkDeclared(tableSchema);
    Filter[] given = filters;
    // Reported as pushed: what the planner used to prune slices, and what skips row groups.
    Set<Integer> used = new LinkedHashSet<>();
    Map<Integer, Integer> jsonIndex = new HashMap<>(); // position in the JSON list -> position in `given`
    for (int i = 0, j = 0; i < given.length; i++) {
      if (RowGroupFilters.toJson(new Filter[] {given[i]}).size() == 1) jsonIndex.put(j++, i);
    }
    for (int j : plan.filtersUsed) if (jsonIndex.containsKey(j)) used.add(jsonIndex.get(j));
    // An incremental read compares whole states of the keys it found: no row group of them is skipped.
    boolean changes = plan.changes != null;
    // Value columns' filters skip row groups only in log-free slices' base files (RowGroupFilters.shownColumns).
    Set<String> shown = RowGroupFilters.shownColumns(tableSchema);
    boolean anyLogFree = !changes && plan.slices.stream().anyMatch(PlanSlice::logFree);
    if (!changes) used.addAll(RowGroupFilters.usable(given, tableSchema, anyLogFree ? shown : keys));
    List<Filter> usedFilters = new ArrayList<>();
    for (int i : used) usedFilters.add(given[i]);
    pushed = usedFilters.toArray(new Filter[0]);
    return new StitchScan(
        plan,
        required,
        tableSchema,
        changes ? null : RowGroupFilters.predicate(given, tableSchema, keys),
        changes ? Set.of() : RowGroupFilters.columns(given, tableSchema, keys),
        changes ? null : RowGroupFilters.predicate(given, tableSchema, shown),
        changes ? Set.of() : RowGroupFilters.columns(given, tableSchema, shown),
        pushed,
        options);
  }

  /**
   * A catalog table declared with a column list (CREATE TABLE t (c TYPE, ...) USING stitchlake) reads those columns
   * as the table has them: a column it lacks, or one declared under another type, is the user's mistake, said as
   * such (the files would otherwise fail to decode as if damaged).
   */
  private void checkDeclared(StructType table) {
    for (StructField declared : required.fields()) {
      scala.Option<Object> at = table.getFieldIndex(declared.name());
      if (at.isEmpty()) continue; // a column the table lacks: the planner has refused it already
      DataType own = table.fields()[(Integer) at.get()].dataType();
      if (!own.sameType(declared.dataType())) {
        throw new StitchException("UsageError", 2, "column " + declared.name() + " is declared "
            + declared.dataType().simpleString() + " but the table has it as " + own.simpleString()
            + ": declare it as the table has it, or declare the table with no column list (it has its own schema)");
      }
    }
  }
}
