package io.stitchlake.spark.io;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A view of another vector without copying it: row {@code i} is the delegate's row {@code map[i]} (row {@code
 * offset + i} when {@code map} is null), except where {@code hidden[i]}: there it shows {@code fill}'s single value
 * (a stream's default where it has no live group). Iceberg's ColumnVectorWithFilter does the same for deleted rows.
 */
public final class ViewVector extends ColumnVector {
  private final ColumnVector delegate;
  private final int[] map;
  private final boolean[] hidden;
  private final ColumnVector fill;
  private final int offset;
  private ViewVector[] children;

  public ViewVector(ColumnVector delegate, int[] map, boolean[] hidden, ColumnVector fill) {
    this(delegate, map, hidden, fill, 0);
  }

  private ViewVector(ColumnVector delegate, int[] map, boolean[] hidden, ColumnVector fill, int offset) {
    super(delegate.dataType());
    this.delegate = delegate;
    this.map = map;
    this.hidden = hidden;
    this.fill = fill;
    this.offset = offset;
  }

  /** The vector this one shows rows [offset, ...) of, when it is such a range; else null. */
  public ColumnVector rangeOf() {
    return map == null && hidden == null ? delegate : null;
  }

  /** The first row of {@link #rangeOf} this one shows. */
  public int offset() {
    return offset;
  }

  /** The delegate's rows from {@code offset} on, as rows from 0. */
  public static ViewVector from(ColumnVector delegate, int offset) {
    return new ViewVector(delegate, null, null, null, offset);
  }

  private ColumnVector source(int row) {
    return hidden != null && hidden[row] ? fill : delegate;
  }

  private int at(int row) {
    if (hidden != null && hidden[row]) return 0;
    return map == null ? offset + row : map[row];
  }

  @Override
  public void close() {
    // The delegate belongs to the file's reader, which closes it.
  }

  @Override
  public boolean hasNull() {
    // Every row a delegate's row: null only where the delegate has one. Hidden rows may show a null default.
    return hidden != null || delegate.hasNull();
  }

  @Override
  public int numNulls() {
    throw new UnsupportedOperationException("numNulls of a view");
  }

  @Override
  public boolean isNullAt(int row) {
    return source(row).isNullAt(at(row));
  }

  @Override
  public boolean getBoolean(int row) {
    return source(row).getBoolean(at(row));
  }

  @Override
  public byte getByte(int row) {
    return source(row).getByte(at(row));
  }

  @Override
  public short getShort(int row) {
    return source(row).getShort(at(row));
  }

  @Override
  public int getInt(int row) {
    return source(row).getInt(at(row));
  }

  @Override
  public int[] getInts(int row, int count) {
    return map == null && hidden == null ? delegate.getInts(offset + row, count) : super.getInts(row, count);
  }

  @Override
  public long getLong(int row) {
    return source(row).getLong(at(row));
  }

  @Override
  public long[] getLongs(int row, int count) {
    return map == null && hidden == null ? delegate.getLongs(offset + row, count) : super.getLongs(row, count);
  }

  @Override
  public float getFloat(int row) {
    return source(row).getFloat(at(row));
  }

  @Override
  public double getDouble(int row) {
    return source(row).getDouble(at(row));
  }

  @Override
  public ColumnarArray getArray(int row) {
    return source(row).getArray(at(row));
  }

  @Override
  public ColumnarMap getMap(int row) {
    return source(row).getMap(at(row));
  }

  @Override
  public Decimal getDecimal(int row, int precision, int scale) {
    return source(row).getDecimal(at(row), precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int row) {
    return source(row).getUTF8String(at(row));
  }

  @Override
  public byte[] getBinary(int row) {
    return source(row).getBinary(at(row));
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    // A struct's fields are views with the same rows (its nullness is the parent's).
    if (children == null) children = new ViewVector[delegate.dataType() instanceof StructType
        ? ((StructType) delegate.dataType()).length() : 0];
    if (children[ordinal] == null) {
      ColumnVector own = fill == null ? null : fill.getChild(ordinal);
      children[ordinal] = new ViewVector(delegate.getChild(ordinal), map, own == null ? null : hidden, own, offset);
    }
    return children[ordinal];
  }
}
