package io.stitchlake.spark.io;

import java.io.Closeable;
import java.io.IOException;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** The batches of one data file, its requested columns in order under the table's types. */
public interface FileBatches extends Closeable {
  boolean next() throws IOException;

  ColumnarBatch get();

  /**
   * Whether the file's rows are in key order, one row per key: its writer marked it so in the footer
   * (stitchlake/merge/stitch.py, {@code KEY_ORDERED}). Known once the file is open, before its first batch.
   */
  default boolean keyOrdered() {
    return false;
  }

  /** Every batch from now on a whole row group in vectors of its own, valid after the next one. */
  default void holdRowGroups() {}
}
