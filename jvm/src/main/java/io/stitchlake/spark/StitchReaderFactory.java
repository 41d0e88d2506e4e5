package io.stitchlake.spark;

import io.stitchlake.spark.plan.MergeView;
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

/** Builds each task's reader: columnar when no slice of the read has logs, merged rows otherwise. */
final class StitchReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  final Broadcast<SerializableConfiguration> conf;
  final StructType output;
  final StructType tableSchema;
  final MergeView merge;
  final String mergeJson;
  final FilterPredicate rowGroups;
  final Set<String> rowGroupColumns;
  final int batchSize;
  final boolean columnar;

  StitchReaderFactory(Broadcast<SerializableConfiguration> conf, StructType output, StructType tableSchema,
      MergeView merge, String mergeJson, FilterPredicate rowGroups, Set<String> rowGroupColumns, int batchSize,
      boolean columnar) {
    this.conf = conf;
    this.output = output;
    this.tableSchema = tableSchema;
    this.merge = merge;
    this.mergeJson = mergeJson;
    this.rowGroups = rowGroups;
    this.rowGroupColumns = rowGroupColumns;
    this.batchSize = batchSize;
    this.columnar = columnar;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return columnar;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new LogFreeReader(this, ((SliceInputPartition) partition).slices);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new SliceRowReader(this, ((SliceInputPartition) partition).slices);
  }
}
