package io.stitchlake.spark;

import io.stitchlake.spark.plan.Plan;
import io.stitchlake.spark.plan.PlanSlice;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.execution.datasources.parquet.ParquetReadSupport;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import scala.reflect.ClassTag$;

/** One planned read: the plan's slices in its input partitions. */
final class StitchScan implements Scan, Batch {
  private final Plan plan;
  private final StructType output;
  private final StructType tableSchema;
  private final FilterPredicate rowGroups;
  private final Set<String> rowGroupColumns;
  private final Filter[] pushed;
  private final Map<String, String> options;

  StitchScan(Plan plan, StructType output, StructType tableSchema, FilterPredicate rowGroups,
      Set<String> rowGroupColumns, Filter[] pushed, Map<String, String> options) {
    this.plan = plan;
    this.output = output;
    this.tableSchema = tableSchema;
    this.rowGroups = rowGroups;
    this.rowGroupColumns = rowGroupColumns;
    this.pushed = pushed;
    this.options = options;
  }

  @Override
  public StructType readSchema() {
    return output;
  }

  @Override
  public String description() {
    long logFree = plan.slices.stream().filter(PlanSlice::logFree).count();
    return "columns=[" + String.join(", ", output.fieldNames()) + "] mode="
        + plan.mode + (plan.asOf != null ? " as_of=" + plan.asOf : "") + " slices=" + plan.slices.size()
        + " (log-free " + logFree + ")" + " pushed=" + Arrays.toString(pushed)
        + (rowGroups != null ? " rowGroupFilter=" + rowGroups : "") + (columnar() ? " columnar" : " merged");
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  /** Columnar for every partition or none (Spark takes one answer per scan): no slice has logs. */
  boolean columnar() {
    SQLConf conf = SQLConf.get();
    if (!conf.parquetVectorizedReaderEnabled() || !conf.wholeStageEnabled()) return false;
    if (output.length() > conf.wholeStageMaxNumFields()) return false;
    for (StructField f : output.fields()) {
      if (f.dataType() instanceof StructType || f.dataType() instanceof ArrayType || f.dataType() instanceof MapType) {
        return false;
      }
    }
    for (PlanSlice s : plan.slices) if (!s.logFree()) return false;
    return true;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    List<InputPartition> out = new ArrayList<>();
    for (List<Integer> part : plan.partitions) {
      List<PlanSlice> slices = new ArrayList<>();
      for (int i : part) slices.add(plan.slices.get(i));
      out.add(new SliceInputPartition(slices));
    }
    return out.toArray(new InputPartition[0]);
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
    // What Spark's ParquetScan sets for its reader (read by key: SQLConf's entries are Scala vals).
    hadoop.set("parquet.read.support.class", ParquetReadSupport.class.getName());
    hadoop.set("spark.sql.session.timeZone", conf.sessionLocalTimeZone());
    hadoop.setBoolean("spark.sql.optimizer.nestedSchemaPruning.enabled", conf.nestedSchemaPruningEnabled());
    hadoop.setBoolean("spark.sql.caseSensitive", conf.caseSensitiveAnalysis());
    hadoop.setBoolean("spark.sql.parquet.binaryAsString", conf.isParquetBinaryAsString());
    hadoop.setBoolean("spark.sql.parquet.int96AsTimestamp", conf.isParquetINT96AsTimestamp());
    hadoop.setBoolean("spark.sql.parquet.inferTimestampNTZ.enabled", conf.parquetInferTimestampNTZEnabled());
    hadoop.setBoolean("spark.sql.legacy.parquet.nanosAsLong", conf.legacyParquetNanosAsLong());
    // Page checksums too, as the Python reader verifies them.
    hadoop.setBoolean("parquet.page.verify-checksum.enabled", true);
    Broadcast<SerializableConfiguration> broadcast = session.sparkContext().broadcast(
        new SerializableConfiguration(hadoop), ClassTag$.MODULE$.apply(SerializableConfiguration.class));
    return new StitchReaderFactory(broadcast, output, tableSchema, plan.merge, plan.mergeJson, rowGroups,
        rowGroupColumns, conf.parquetVectorizedReaderBatchSize(), columnar());
  }
}
