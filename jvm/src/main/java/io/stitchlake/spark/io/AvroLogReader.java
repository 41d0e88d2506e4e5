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

  private static void put(WritableColumnVector v, int row, Object value, DataType type, PlanFile file) {
    if (value == null) {
      v.putNull(row);
    } else if (type instanceof LongType || type instanceof TimestampType) {
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
    } else {
      throw new UnsupportedOperationException(file.path + ": the JVM reader does not read " + type.simpleString()
          + " columns of Avro logs yet");
    }
  }

  private static byte[] bytes(ByteBuffer buffer) {
    byte[] out = new byte[buffer.remaining()];
    buffer.duplicate().get(out);
    return out;
  }
}
