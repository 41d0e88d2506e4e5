package io.stitchlake.spark;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.merge.SliceMerger;
import io.stitchlake.spark.plan.ChangeSlice;
import io.stitchlake.spark.plan.Plan;
import io.stitchlake.spark.plan.PlanSlice;
import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.spark.SparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import scala.reflect.ClassTag$;

/** One planned read: the plan's slices in its input partitions. */
final class StitchScan implements Scan, Batch {
  private static final BroadcastConfs BROADCASTS = new BroadcastConfs(8);

  private final Plan plan;
  private final StructType output;
  private final StructType tableSchema;
  private final FilterPredicate rowGroups;
  private final Set<String> rowGroupColumns;
  /** The predicate over value columns too, for base files whose rows show every stream (RowGroupFilters). */
  private final FilterPredicate shownRowGroups;
  private final Set<String> shownRowGroupColumns;
  private final Filter[] pushed;
  private final Map<String, String> options;

  StitchScan(Plan plan, StructType output, StructType tableSchema, FilterPredicate rowGroups,
      Set<String> rowGroupColumns, FilterPredicate shownRowGroups, Set<String> shownRowGroupColumns, Filter[] pushed,
      Map<String, String> options) {
    this.plan = plan;
    this.output = output;
    this.tableSchema = tableSchema;
    this.rowGroups = rowGroups;
    this.rowGroupColumns = rowGroupColumns;
    this.shownRowGroups = shownRowGroups;
    this.shownRowGroupColumns = shownRowGroupColumns;
    this.pushed = pushed;
    this.options = options;
  }

  @Override
  public StructType readSchema() {
    return output;
  }

  @Override
  public String description() {
    if (plan.changes != null) {
      return "columns=[" + String.join(", ", output.fieldNames()) + "] changes since=" + plan.changes.since
          + " until=" + plan.changes.until + (plan.changes.beforeImages ? " before_images" : "") + " file groups="
          + plan.changeSlices.size() + " pushed=" + Arrays.toString(pushed) + " rows";
    }
    boolean batches = columnar();
    long logFree = plan.slices.stream().filter(PlanSlice::logFree).count();
    return "columns=[" + String.join(", ", output.fieldNames()) + "] mode="
        + plan.mode + (plan.asOf != null ? " as_of=" + plan.asOf : "") + " slices=" + plan.slices.size()
        + " (log-free " + logFree + ")" + " pushed=" + Arrays.toString(pushed)
        + (rowGroups != null ? " rowGroupFilter=" + rowGroups : "")
        + (shownRowGroups != null && !shownRowGroups.equals(rowGroups) && logFree > 0
            ? " shownRowGroupFilter=" + shownRowGroups : "")
        + (batches && logFree == plan.slices.size() ? " columnar" : " merged") + (batches ? " batches" : " rows");
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  /**
   * Batches for every partition or none (Spark takes one answer per scan): when Spark can read batches here
   * (vectorized reads and whole-stage code on, not too many fields) and every output column is flat
   * ({@link SliceMerger#flat}); then slices with logs are merged into batches too ({@link SliceReader#batches}).
   */
  boolean columnar() {
    if (plan.changes != null) return false; // change rows are built one by one
    SQLConf conf = SQLConf.get();
    if (!conf.parquetVectorizedReaderEnabled() || !conf.wholeStageEnabled()) return false;
    if (output.length() > conf.wholeStageMaxNumFields()) return false;
    return SliceMerger.flat(output);
  }

  @Override
  public InputPartition[] planInputPartitions() {
    List<InputPartition> out = new ArrayList<>();
    if (plan.changes != null) {
      for (List<Integer> part : plan.partitions) {
        List<ChangeSlice> groups = new ArrayList<>();
        for (int i : part) groups.add(plan.changeSlices.get(i));
        out.add(new ChangeInputPartition(groups));
      }
      return out.toArray(new InputPartition[0]);
    }
    for (List<Integer> part : balanced(plan, cores(), openCost())) {
      List<PlanSlice> slices = new ArrayList<>();
      for (int i : part) slices.add(plan.slices.get(i));
      out.add(new SliceInputPartition(slices));
    }
    return out.toArray(new InputPartition[0]);
  }

  private static int cores() {
    try {
      return Math.max(1, SparkSession.active().sparkContext().defaultParallelism());
    } catch (RuntimeException e) {
      return 1;
    }
  }

  private static long openCost() {
    try {
      return Long.parseLong(SQLConf.get().getConfString("spark.sql.files.openCostInBytes", "4194304").trim());
    } catch (RuntimeException e) {
      return 4L << 20;
    }
  }

  /**
   * The planner's input partitions, re-balanced so that every wave of tasks keeps every core busy: their count
   * rounded up to a multiple of the cores (at most one slice each), the slices dealt largest first to the lightest
   * partition (bytes plus the open cost per file, as the planner weighs them). A slice is the unit of a merge and
   * costs far more than a file does to Spark's own packing: four equal slices packed by size into three partitions
   * on two cores ran as two waves of one slice and a third of two, a third longer than four single-slice tasks.
   */
  static List<List<Integer>> balanced(Plan plan, int cores, long openCost) {
    List<List<Integer>> planned = plan.partitions;
    int slices = 0;
    for (List<Integer> part : planned) slices += part.size();
    int target = Math.min(slices, ((planned.size() + cores - 1) / cores) * cores);
    if (cores <= 1 || target <= planned.size()) return planned;
    List<Integer> order = new ArrayList<>();
    for (List<Integer> part : planned) order.addAll(part);
    long[] weight = new long[plan.slices.size()];
    for (int i : order) {
      for (io.stitchlake.spark.plan.PlanFile f : plan.slices.get(i).files()) weight[i] += f.bytes + openCost;
    }
    order.sort((a, b) -> Long.compare(weight[b], weight[a]));
    List<List<Integer>> out = new ArrayList<>();
    long[] load = new long[target];
    for (int p = 0; p < target; p++) out.add(new ArrayList<>());
    for (int i : order) {
      int lightest = 0;
      for (int p = 1; p < target; p++) if (load[p] < load[lightest]) lightest = p;
      out.get(lightest).add(i);
      load[lightest] += weight[i];
    }
    for (List<Integer> part : out) part.sort(null);
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    SparkSession session = SparkSession.active();
    SQLConf conf = SQLConf.get();
    Configuration hadoop = session.sessionState().newHadoopConf();
    // As newHadoopConfWithOptions: a read's options reach the file system (fs.s3a.* given per read).
    StitchScanBuilder.plannerOptions(options).forEach((k, v) -> {
      if (!k.equals("path") && !k.equals("paths")) hadoop.set(k, v);
    });
    plan.hadoopConf.forEach(hadoop::set);
    DataFileReader.configure(hadoop, conf);
    Broadcast<SerializableConfiguration> broadcast = BROADCASTS.of(session.sparkContext(), hadoop);
    return new StitchReaderFactory(broadcast, output, tableSchema, plan.merge, plan.mergeJson, rowGroups,
        rowGroupColumns, shownRowGroups, shownRowGroupColumns, conf.parquetVectorizedReaderBatchSize(), columnar(),
        plan);
  }

  /**
   * The Hadoop confs this JVM broadcast to its tasks, by their settings: the last {@code capacity} distinct ones of
   * the live SparkContext. A scan whose settings equal an earlier one's takes that broadcast: serialising and
   * storing a conf of about a thousand settings was a fifth of the driver's work in planning a read, paid again in
   * every query of the same table.
   */
  static final class BroadcastConfs {
    private final int capacity;
    private final Map<Map<String, String>, Broadcast<SerializableConfiguration>> known;
    /** Weakly: a stopped context, and its confs with it, go when nothing else holds them. */
    private WeakReference<SparkContext> context = new WeakReference<>(null);

    BroadcastConfs(int capacity) {
      this.capacity = capacity;
      this.known = new LinkedHashMap<>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Map<String, String>, Broadcast<SerializableConfiguration>> e) {
          return size() > BroadcastConfs.this.capacity;
        }
      };
    }

    synchronized Broadcast<SerializableConfiguration> of(SparkContext sc, Configuration hadoop) {
      if (sc != context.get()) {
        known.clear();
        context = new WeakReference<>(sc);
      }
      Map<String, String> settings = new HashMap<>();
      for (Map.Entry<String, String> e : hadoop) settings.put(e.getKey(), e.getValue());
      return known.computeIfAbsent(settings, s -> sc.broadcast(
          new SerializableConfiguration(hadoop), ClassTag$.MODULE$.apply(SerializableConfiguration.class)));
    }
  }
}
