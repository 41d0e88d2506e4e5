package io.stitchlake.spark.io;

import io.stitchlake.spark.plan.PlanFile;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.file.DataFileReader;
import org.apache.avro.file.SeekableByteArrayInput;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Avro log blocks (stitchlake/io/avro.py: every field a union with null; dates and timestamps as their raw ints,
 * decimals as big-endian unscaled bytes) into on-heap column vectors, with Avro 1.12 from Spark's own jars.
 */
final class AvroLogReader {
  private AvroLogReader() {}

  static ColumnarBatch read(PlanFile file, byte[] data, StructType columns) throws IOException {
    List<GenericRecord> records = new ArrayList<>();
    Schema schema;
    try (DataFileReader<GenericRecord> reader =
        new DataFileReader<>(new SeekableByteArrayInput(data), new GenericDatumReader<>())) {
      schema = reader.getSchema();
      while (reader.hasNext()) records.add(reader.next());
    } catch (IOException | RuntimeException e) {
      throw new CorruptFileException(file.path, file.path + ": cannot read data file (" + e + ")");
    }
    int rows = records.size();
    ColumnVector[] vectors = new ColumnVector[columns.length()];
    for (int c = 0; c < vectors.length; c++) {
      StructField field = columns.fields()[c];
      Schema.Field own = schema.getField(field.name());
      if (own == null) {
        throw new CorruptFileException(file.path, file.path + ": missing columns " + field.name());
      }
      OnHeapColumnVector vector = new OnHeapColumnVector(Math.max(rows, 1), field.dataType());
      int pos = own.pos();
      for (int r = 0; r < rows; r++) put(vector, r, records.get(r).get(pos), field.dataType(), file);
      vectors[c] = vector;
    }
    return new ColumnarBatch(vectors, rows);
  }

  /**
   * Value {@code value} (Avro's generic form) at {@code row} of {@code v}. Nested values recurse: a struct's fields
   * sit at the same row of its children, an array's or map's elements are added after the child's elements so far
   * (a map is an Avro array of {key, value} records, stitchlake/io/avro.py).
   */
  private static void put(WritableColumnVector v, int row, Object value, DataType type, PlanFile file) {
    v.reserve(row + 1);
    if (value == null) {
      v.putNull(row);
      if (type instanceof StructType) {
        StructField[] fields = ((StructType) type).fields();
        for (int f = 0; f < fields.length; f++) put(v.getChild(f), row, null, fields[f].dataType(), file);
      }
      return;
    }
    if (type instanceof LongType || type instanceof TimestampType) {
      v.putLong(row, ((Number) value).longValue());
    } else if (type instanceof IntegerType || type instanceof DateType) {
      v.putInt(row, ((Number) value).intValue());
    } else if (type instanceof DoubleType) {
      v.putDouble(row, ((Number) value).doubleValue());
    } else if (type instanceof FloatType) {
      v.putFloat(row, ((Number) value).floatValue());
    } else if (type instanceof BooleanType) {
      v.putBoolean(row, (Boolean) value);
    } else if (type instanceof StringType) {
      byte[] bytes = value.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8);
      v.putByteArray(row, bytes);
    } else if (type instanceof BinaryType) {
      v.putByteArray(row, bytes((ByteBuffer) value));
    } else if (type instanceof DecimalType) {
      DecimalType d = (DecimalType) type;
      BigDecimal decimal = new BigDecimal(new BigInteger(bytes((ByteBuffer) value)), d.scale());
      v.putDecimal(row, Decimal.apply(decimal, d.precision(), d.scale()), d.precision());
    } else if (type instanceof StructType) {
      v.putNotNull(row);
      GenericRecord record = (GenericRecord) value;
      StructField[] fields = ((StructType) type).fields();
      for (int f = 0; f < fields.length; f++) {
        Schema.Field own = record.getSchema().getField(fields[f].name());
        put(v.getChild(f), row, own == null ? null : record.get(own.pos()), fields[f].dataType(), file);
      }
    } else if (type instanceof ArrayType) {
      List<?> items = (List<?>) value;
      WritableColumnVector elements = v.arrayData();
      int at = elements.getElementsAppended();
      DataType itemType = ((ArrayType) type).elementType();
      for (int i = 0; i < items.size(); i++) put(elements, at + i, items.get(i), itemType, file);
      elements.addElementsAppended(items.size());
      v.putNotNull(row);
      v.putArray(row, at, items.size());
    } else if (type instanceof MapType) {
      List<?> entries = (List<?>) value;
      MapType m = (MapType) type;
      WritableColumnVector keys = v.getChild(0);
      WritableColumnVector values = v.getChild(1);
      int at = keys.getElementsAppended();
      for (int i = 0; i < entries.size(); i++) {
        GenericRecord entry = (GenericRecord) entries.get(i);
        put(keys, at + i, entry.get("key"), m.keyType(), file);
        put(values, at + i, entry.get("value"), m.valueType(), file);
      }
      keys.addElementsAppended(entries.size());
      values.addElementsAppended(entries.size());
      v.putNotNull(row);
      v.putArray(row, at, entries.size());
    } else {
      throw new UnsupportedOperationException(file.path + ": the JVM reader does not read " + type.simpleString()
          + " columns of Avro logs");
    }
  }

  private static byte[] bytes(ByteBuffer buffer) {
    byte[] out = new byte[buffer.remaining()];
    buffer.duplicate().get(out);
    return out;
  }
}
