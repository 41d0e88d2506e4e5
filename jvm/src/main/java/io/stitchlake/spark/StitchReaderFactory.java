package io.stitchlake.spark;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.plan.MergeView;
import io.stitchlake.spark.plan.Plan;
import io.stitchlake.spark.plan.PlanSlice;
import java.util.List;
import java.util.Set;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

/** Builds each task's reader: batches when every output column is flat (merged batches where a slice has logs),
 * merged rows otherwise; change rows for an incremental read. */
final class StitchReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  final Broadcast<SerializableConfiguration> conf;
  final StructType output;
  final StructType tableSchema;
  final MergeView merge;
  final String mergeJson;
  final FilterPredicate rowGroups;
  final Set<String> rowGroupColumns;
  /** Over value columns too: for base files whose rows show every stream ({@link LogFreeReader}). */
  final FilterPredicate shownRowGroups;
  final Set<String> shownRowGroupColumns;
  final int batchSize;
  final boolean columnar;
  /** An incremental read's range (null: a snapshot read). */
  final Plan.Changes changes;
  /** The plan's timeline location and latest completion seen ({@link DataFileReader#planned}). */
  final String timeline;
  final String plannedAt;

  StitchReaderFactory(Broadcast<SerializableConfiguration> conf, StructType output, StructType tableSchema,
      MergeView merge, String mergeJson, FilterPredicate rowGroups, Set<String> rowGroupColumns,
      FilterPredicate shownRowGroups, Set<String> shownRowGroupColumns, int batchSize, boolean columnar, Plan plan) {
    this.conf = conf;
    this.output = output;
    this.tableSchema = tableSchema;
    this.merge = merge;
    this.mergeJson = mergeJson;
    this.rowGroups = rowGroups;
    this.rowGroupColumns = rowGroupColumns;
    this.shownRowGroups = shownRowGroups;
    this.shownRowGroupColumns = shownRowGroupColumns;
    this.batchSize = batchSize;
    this.columnar = columnar;
    this.changes = plan.changes;
    this.timeline = plan.timeline;
    this.plannedAt = plan.plannedAt;
  }

  /** A task's reader of the plan's data files. */
  DataFileReader files() {
    return new DataFileReader(conf.value().value(), batchSize).planned(timeline, plannedAt);
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return columnar;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    List<PlanSlice> slices = ((SliceInputPartition) partition).slices;
    for (PlanSlice slice : slices) if (!slice.logFree()) return SliceReader.batches(this, slices);
    return new LogFreeReader(this, slices);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    if (partition instanceof ChangeInputPartition) return new ChangeReader(this, ((ChangeInputPartition) partition).groups);
    return SliceReader.rows(this, ((SliceInputPartition) partition).slices);
  }
}
