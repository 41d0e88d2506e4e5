package io.stitchlake.spark.io;

import java.util.Arrays;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One output column of the reader's batches, without copying a cell: row {@code i} is row {@code rows[i]} of
 * {@code sources[src[i]]}: for a merged slice the vector of the segment the merge chose for it, or a constant vector
 * (a default, or null); for a log-free slice the base file's vector, or the default where its stream is deleted.
 * Every column the reader hands Spark is one of these, so that Spark's generated code meets one vector class
 * whichever slices a read has (docs/spark-reader.md, "Compiled early"); the merge refills {@code src} and
 * {@code rows} for every batch of a slice.
 *
 * <p>A string source that Parquet left dictionary-encoded is decoded once per dictionary entry: Spark's own
 * vector copies the entry's bytes on every read (a tenth of a warm merged read went there), and merged rows read
 * many cells of few distinct values (a currency, a status).
 */
public final class GatherVector extends ColumnVector {
  private final ColumnVector[] sources;
  /**
   * Per row its source and its row there. Refilled only by the merge, for the vectors it made: a log-free slice's
   * columns share one identity array among them and from batch to batch ({@code LogFreeReader}).
   */
  public final int[] src;
  public final int[] rows;
  private GatherVector[] children;
  /** Per source: its dictionary ids when it is a dictionary-encoded string vector, else null. */
  private final WritableColumnVector[] dictIds;
  /** Per source: its dictionary's entries decoded so far, by id (grown on demand). */
  private final UTF8String[][] decoded;

  public GatherVector(ColumnVector[] sources, int[] src, int[] rows) {
    super(sources[sources.length - 1].dataType());
    this.sources = sources;
    this.src = src;
    this.rows = rows;
    dictIds = new WritableColumnVector[sources.length];
    decoded = new UTF8String[sources.length][];
    if (!(dataType() instanceof StringType)) return;
    for (int i = 0; i < sources.length; i++) {
      if (sources[i] instanceof WritableColumnVector w && w.hasDictionary()) {
        dictIds[i] = w.getDictionaryIds();
        decoded[i] = new UTF8String[16];
      }
    }
  }

  @Override
  public void close() {
    // The sources belong to the slice's file readers and constants, which outlive the batch.
  }

  @Override
  public boolean hasNull() {
    return true; // conservative: a default or a chosen cell may be null
  }

  @Override
  public int numNulls() {
    throw new UnsupportedOperationException("numNulls of a gathered column");
  }

  @Override
  public boolean isNullAt(int row) {
    return sources[src[row]].isNullAt(rows[row]);
  }

  @Override
  public boolean getBoolean(int row) {
    return sources[src[row]].getBoolean(rows[row]);
  }

  @Override
  public byte getByte(int row) {
    return sources[src[row]].getByte(rows[row]);
  }

  @Override
  public short getShort(int row) {
    return sources[src[row]].getShort(rows[row]);
  }

  @Override
  public int getInt(int row) {
    return sources[src[row]].getInt(rows[row]);
  }

  @Override
  public long getLong(int row) {
    return sources[src[row]].getLong(rows[row]);
  }

  @Override
  public float getFloat(int row) {
    return sources[src[row]].getFloat(rows[row]);
  }

  @Override
  public double getDouble(int row) {
    return sources[src[row]].getDouble(rows[row]);
  }

  @Override
  public ColumnarArray getArray(int row) {
    return sources[src[row]].getArray(rows[row]);
  }

  @Override
  public ColumnarMap getMap(int row) {
    return sources[src[row]].getMap(rows[row]);
  }

  @Override
  public Decimal getDecimal(int row, int precision, int scale) {
    return sources[src[row]].getDecimal(rows[row], precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int row) {
    int s = src[row];
    int r = rows[row];
    WritableColumnVector ids = dictIds[s];
    if (ids == null) return sources[s].getUTF8String(r);
    if (sources[s].isNullAt(r)) return null;
    int id = ids.getDictId(r);
    UTF8String[] known = decoded[s];
    if (id >= known.length) known = decoded[s] = Arrays.copyOf(known, Math.max(id + 1, known.length * 2));
    UTF8String value = known[id];
    if (value == null) value = known[id] = sources[s].getUTF8String(r); // a copy of the entry's bytes: kept
    return value;
  }

  @Override
  public byte[] getBinary(int row) {
    return sources[src[row]].getBinary(rows[row]);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    // A struct's fields gather the same rows from the sources' fields (its nullness is the parent's).
    if (children == null) {
      children = new GatherVector[dataType() instanceof StructType ? ((StructType) dataType()).length() : 0];
    }
    if (children[ordinal] == null) {
      ColumnVector[] fields = new ColumnVector[sources.length];
      for (int i = 0; i < sources.length; i++) fields[i] = sources[i].getChild(ordinal);
      children[ordinal] = new GatherVector(fields, src, rows);
    }
    return children[ordinal];
  }
}
