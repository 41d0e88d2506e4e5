package io.stitchlake.spark.io;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Rows {@code [offset, ...)} of another vector as rows from 0, without copying it: a window's range of a file's
 * batch ({@code merge.KeyWindows}). The merge's output gathers from the delegate itself ({@link #rangeOf}), so Spark
 * never reads through a view.
 */
public final class ViewVector extends ColumnVector {
  private final ColumnVector delegate;
  private final int offset;
  private ViewVector[] children;

  private ViewVector(ColumnVector delegate, int offset) {
    super(delegate.dataType());
    this.delegate = delegate;
    this.offset = offset;
  }

  /** The delegate's rows from {@code offset} on, as rows from 0. */
  public static ViewVector from(ColumnVector delegate, int offset) {
    return new ViewVector(delegate, offset);
  }

  /** The vector this one shows rows [offset, ...) of. */
  public ColumnVector rangeOf() {
    return delegate;
  }

  /** The first row of {@link #rangeOf} this one shows. */
  public int offset() {
    return offset;
  }

  @Override
  public void close() {
    // The delegate belongs to the file's reader, which closes it.
  }

  @Override
  public boolean hasNull() {
    return delegate.hasNull(); // every row a delegate's row: null only where the delegate has one
  }

  @Override
  public int numNulls() {
    throw new UnsupportedOperationException("numNulls of a view");
  }

  @Override
  public boolean isNullAt(int row) {
    return delegate.isNullAt(offset + row);
  }

  @Override
  public boolean getBoolean(int row) {
    return delegate.getBoolean(offset + row);
  }

  @Override
  public byte getByte(int row) {
    return delegate.getByte(offset + row);
  }

  @Override
  public short getShort(int row) {
    return delegate.getShort(offset + row);
  }

  @Override
  public int getInt(int row) {
    return delegate.getInt(offset + row);
  }

  @Override
  public int[] getInts(int row, int count) {
    return delegate.getInts(offset + row, count);
  }

  @Override
  public long getLong(int row) {
    return delegate.getLong(offset + row);
  }

  @Override
  public long[] getLongs(int row, int count) {
    return delegate.getLongs(offset + row, count);
  }

  @Override
  public float getFloat(int row) {
    return delegate.getFloat(offset + row);
  }

  @Override
  public double getDouble(int row) {
    return delegate.getDouble(offset + row);
  }

  @Override
  public ColumnarArray getArray(int row) {
    return delegate.getArray(offset + row);
  }

  @Override
  public ColumnarMap getMap(int row) {
    return delegate.getMap(offset + row);
  }

  @Override
  public Decimal getDecimal(int row, int precision, int scale) {
    return delegate.getDecimal(offset + row, precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int row) {
    return delegate.getUTF8String(offset + row);
  }

  @Override
  public byte[] getBinary(int row) {
    return delegate.getBinary(offset + row);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    // A struct's fields are views of the same rows (its nullness is the parent's).
    if (children == null) children = new ViewVector[delegate.dataType() instanceof StructType
        ? ((StructType) delegate.dataType()).length() : 0];
    if (children[ordinal] == null) children[ordinal] = new ViewVector(delegate.getChild(ordinal), offset);
    return children[ordinal];
  }
}
