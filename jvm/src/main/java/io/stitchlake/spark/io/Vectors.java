package io.stitchlake.spark.io;

import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;

/**
 * Whole runs of a vector's values. Spark's {@code getLongs} and {@code getInts} of its own vectors read the stored
 * values as they are and ignore a dictionary (a page Parquet kept dictionary-encoded holds ids there), so a vector
 * with one is read value by value.
 */
public final class Vectors {
  private Vectors() {}

  private static boolean whole(ColumnVector v) {
    return !(v instanceof WritableColumnVector w) || !w.hasDictionary();
  }

  public static long[] longs(ColumnVector v, int row, int count) {
    if (whole(v)) return v.getLongs(row, count);
    long[] out = new long[count];
    for (int i = 0; i < count; i++) out[i] = v.getLong(row + i);
    return out;
  }

  public static int[] ints(ColumnVector v, int row, int count) {
    if (whole(v)) return v.getInts(row, count);
    int[] out = new int[count];
    for (int i = 0; i < count; i++) out[i] = v.getInt(row + i);
    return out;
  }
}
