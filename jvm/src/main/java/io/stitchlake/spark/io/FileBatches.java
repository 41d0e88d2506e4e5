package io.stitchlake.spark.io;

import java.io.Closeable;
import java.io.IOException;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** The batches of one data file, its requested columns in order under the table's types. */
public interface FileBatches extends Closeable {
  boolean next() throws IOException;

  ColumnarBatch get();
}
