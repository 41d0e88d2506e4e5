package io.stitchlake.spark.merge;

import java.util.Map;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** One batch of one file: the unit the merge's passes walk. */
final class Segment {
  final FileData file;
  final ColumnarBatch batch;
  final int rows;
  final Map<String, Integer> index;

  Segment(FileData file, ColumnarBatch batch, Map<String, Integer> index) {
    this.file = file;
    this.batch = batch;
    this.rows = batch.numRows();
    this.index = index;
  }

  ColumnVector column(String name) {
    Integer i = index.get(name);
    return i == null ? null : batch.column(i);
  }
}
