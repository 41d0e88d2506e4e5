package io.stitchlake.spark.io;

import com.fasterxml.jackson.databind.JsonNode;
import io.stitchlake.spark.plan.Plan;
import java.io.IOException;
import java.math.BigDecimal;
import java.util.Base64;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

/** The plan's literals (defaults, absent columns' values), in Spark's internal form, as constant column vectors. */
public final class Literals {
  private Literals() {}

  /** A vector of {@code rows} rows all showing the literal (JSON text: "null" for none). */
  public static ConstantColumnVector constant(int rows, DataType type, String json) {
    ConstantColumnVector out = new ConstantColumnVector(Math.max(rows, 1), type);
    JsonNode value;
    try {
      value = json == null ? null : Plan.JSON.readTree(json);
    } catch (IOException e) {
      throw new IllegalArgumentException("unreadable literal " + json, e);
    }
    if (value == null || value.isNull()) {
      out.setNull();
      return out;
    }
    out.setNotNull();
    if (type instanceof BooleanType) out.setBoolean(value.asBoolean());
    else if (type instanceof ByteType) out.setByte((byte) value.asInt());
    else if (type instanceof ShortType) out.setShort((short) value.asInt());
    else if (type instanceof IntegerType || type instanceof DateType) out.setInt(value.asInt());
    else if (type instanceof LongType || type instanceof TimestampType || type instanceof TimestampNTZType) {
      out.setLong(value.asLong());
    } else if (type instanceof FloatType) out.setFloat((float) value.asDouble());
    else if (type instanceof DoubleType) out.setDouble(value.asDouble());
    else if (type instanceof StringType) out.setUtf8String(UTF8String.fromString(value.asText()));
    else if (type instanceof BinaryType) out.setBinary(Base64.getDecoder().decode(value.asText()));
    else if (type instanceof DecimalType) {
      DecimalType d = (DecimalType) type;
      out.setDecimal(Decimal.apply(new BigDecimal(value.asText()), d.precision(), d.scale()), d.precision());
    } else {
      throw new UnsupportedOperationException(
          "the JVM reader has no " + type.simpleString() + " literal yet (value " + json + ")");
    }
    return out;
  }
}
