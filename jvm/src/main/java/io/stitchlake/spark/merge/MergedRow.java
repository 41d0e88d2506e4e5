package io.stitchlake.spark.merge;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.SpecializedGettersReader;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.CalendarInterval;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.sql.vectorized.ColumnVector;

/**
 * One output row that reads each cell straight from the column vector (and row) the merge chose for it, or a
 * constant (a default): no boxing and no copy per cell; Spark's projection copies what it keeps. The merge
 * reuses one instance for every row it returns, as Spark's own readers do: call {@link #copy()} to keep one.
 * It extends GenericInternalRow rather than InternalRow because each Spark minor adds abstract getters (4.2
 * binary views, 4.3 nanosecond timestamps): those not overridden here fall back to {@link #genericGet}.
 */
final class MergedRow extends GenericInternalRow {
  private static final long serialVersionUID = 1L;

  final ColumnVector[] vectors;
  final int[] rows;
  final Object[] constants;
  private final DataType[] types;

  MergedRow(DataType[] types) {
    super(types.length);
    this.types = types;
    this.vectors = new ColumnVector[types.length];
    this.rows = new int[types.length];
    this.constants = new Object[types.length];
  }

  void set(int i, ColumnVector vector, int row) {
    vectors[i] = vector;
    rows[i] = row;
  }

  void constant(int i, Object value) {
    vectors[i] = null;
    constants[i] = value;
  }

  @Override public int numFields() { return types.length; }

  @Override public void setNullAt(int i) { throw new UnsupportedOperationException("a merged row is read-only"); }

  @Override public void update(int i, Object value) {
    throw new UnsupportedOperationException("a merged row is read-only");
  }

  @Override
  public GenericInternalRow copy() {
    Object[] values = new Object[types.length];
    for (int i = 0; i < values.length; i++) {
      if (isNullAt(i)) continue;
      Object v = get(i, types[i]);
      if (v instanceof UTF8String) v = ((UTF8String) v).copy();
      else if (v instanceof ArrayData) v = ((ArrayData) v).copy();
      else if (v instanceof MapData) v = ((MapData) v).copy();
      else if (v instanceof InternalRow) v = ((InternalRow) v).copy();
      else if (v instanceof byte[]) v = ((byte[]) v).clone();
      values[i] = v;
    }
    return new GenericInternalRow(values);
  }

  @Override public boolean isNullAt(int i) {
    ColumnVector v = vectors[i];
    return v == null ? constants[i] == null : v.isNullAt(rows[i]);
  }

  @Override public boolean getBoolean(int i) {
    ColumnVector v = vectors[i];
    return v == null ? (Boolean) constants[i] : v.getBoolean(rows[i]);
  }

  @Override public byte getByte(int i) {
    ColumnVector v = vectors[i];
    return v == null ? ((Number) constants[i]).byteValue() : v.getByte(rows[i]);
  }

  @Override public short getShort(int i) {
    ColumnVector v = vectors[i];
    return v == null ? ((Number) constants[i]).shortValue() : v.getShort(rows[i]);
  }

  @Override public int getInt(int i) {
    ColumnVector v = vectors[i];
    return v == null ? ((Number) constants[i]).intValue() : v.getInt(rows[i]);
  }

  @Override public long getLong(int i) {
    ColumnVector v = vectors[i];
    return v == null ? ((Number) constants[i]).longValue() : v.getLong(rows[i]);
  }

  @Override public float getFloat(int i) {
    ColumnVector v = vectors[i];
    return v == null ? ((Number) constants[i]).floatValue() : v.getFloat(rows[i]);
  }

  @Override public double getDouble(int i) {
    ColumnVector v = vectors[i];
    return v == null ? ((Number) constants[i]).doubleValue() : v.getDouble(rows[i]);
  }

  @Override public Decimal getDecimal(int i, int precision, int scale) {
    ColumnVector v = vectors[i];
    return v == null ? (Decimal) constants[i] : v.getDecimal(rows[i], precision, scale);
  }

  @Override public UTF8String getUTF8String(int i) {
    ColumnVector v = vectors[i];
    return v == null ? (UTF8String) constants[i] : v.getUTF8String(rows[i]);
  }

  @Override public byte[] getBinary(int i) {
    ColumnVector v = vectors[i];
    return v == null ? (byte[]) constants[i] : v.getBinary(rows[i]);
  }

  @Override public CalendarInterval getInterval(int i) {
    ColumnVector v = vectors[i];
    return v == null ? (CalendarInterval) constants[i] : v.getInterval(rows[i]);
  }

  @Override public InternalRow getStruct(int i, int numFields) {
    ColumnVector v = vectors[i];
    return v == null ? (InternalRow) constants[i] : v.getStruct(rows[i]);
  }

  @Override public ArrayData getArray(int i) {
    ColumnVector v = vectors[i];
    return v == null ? (ArrayData) constants[i] : v.getArray(rows[i]);
  }

  @Override public MapData getMap(int i) {
    ColumnVector v = vectors[i];
    return v == null ? (MapData) constants[i] : v.getMap(rows[i]);
  }

  @Override public Object get(int i, DataType type) {
    return SpecializedGettersReader.read(this, i, type, true, true);
  }

  @Override public Object genericGet(int i) {
    return isNullAt(i) ? null : get(i, types[i]);
  }
}
