package io.stitchlake.spark.merge;

import com.fasterxml.jackson.databind.JsonNode;
import io.stitchlake.spark.plan.Plan;
import java.io.IOException;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
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
import org.apache.spark.unsafe.types.UTF8String;

/** Stitchlake type names as Spark types, and plan literals (Spark's internal form, as JSON) as Spark values. */
public final class Types {
  private Types() {}

  public static DataType parse(String name) {
    String t = name.replaceAll("\\s+", "");
    String lower = t.toLowerCase(java.util.Locale.ROOT);
    switch (lower) {
      case "int": return DataTypes.IntegerType;
      case "long": return DataTypes.LongType;
      case "float": return DataTypes.FloatType;
      case "double": return DataTypes.DoubleType;
      case "boolean": return DataTypes.BooleanType;
      case "string": return DataTypes.StringType;
      case "binary": return DataTypes.BinaryType;
      case "date": return DataTypes.DateType;
      case "timestamp": return DataTypes.TimestampType;
      default: break;
    }
    if (lower.startsWith("decimal(")) {
      String[] ps = lower.substring(8, lower.length() - 1).split(",");
      return DataTypes.createDecimalType(Integer.parseInt(ps[0]), Integer.parseInt(ps[1]));
    }
    if (lower.startsWith("array<")) {
      return DataTypes.createArrayType(parse(t.substring(6, t.length() - 1)), true);
    }
    if (lower.startsWith("map<")) {
      List<String> kv = splitTop(t.substring(4, t.length() - 1));
      return DataTypes.createMapType(parse(kv.get(0)), parse(kv.get(1)), true);
    }
    if (lower.startsWith("struct<")) {
      List<StructField> fields = new ArrayList<>();
      for (String part : splitTop(t.substring(7, t.length() - 1))) {
        int colon = part.indexOf(':');
        fields.add(DataTypes.createStructField(part.substring(0, colon), parse(part.substring(colon + 1)), true));
      }
      return DataTypes.createStructType(fields);
    }
    throw new IllegalArgumentException("unknown stitchlake type " + name);
  }

  private static List<String> splitTop(String text) {
    List<String> parts = new ArrayList<>();
    int depth = 0;
    int start = 0;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '<' || c == '(') depth++;
      else if (c == '>' || c == ')') depth--;
      else if (c == ',' && depth == 0) {
        parts.add(text.substring(start, i));
        start = i + 1;
      }
    }
    parts.add(text.substring(start));
    return parts;
  }

  /** A literal given as JSON text ("null" or null: none) as a Spark internal value of {@code type}. */
  public static Object literal(DataType type, String json) {
    if (json == null) return null;
    try {
      return literal(type, Plan.JSON.readTree(json));
    } catch (IOException e) {
      throw new IllegalArgumentException("unreadable literal " + json + ": " + e.getMessage(), e);
    }
  }

  public static Object literal(DataType type, JsonNode v) {
    if (v == null || v.isNull()) return null;
    if (type instanceof IntegerType || type instanceof DateType) return v.asInt();
    if (type instanceof LongType || type instanceof TimestampType) return v.asLong();
    if (type instanceof FloatType) return (float) number(v);
    if (type instanceof DoubleType) return number(v);
    if (type instanceof BooleanType) return v.asBoolean();
    if (type instanceof StringType) return UTF8String.fromString(v.asText());
    if (type instanceof BinaryType) return Base64.getDecoder().decode(v.asText());
    if (type instanceof DecimalType) {
      DecimalType d = (DecimalType) type;
      Decimal out = Decimal.apply(new BigDecimal(v.asText()));
      out.changePrecision(d.precision(), d.scale());
      return out;
    }
    if (type instanceof ArrayType) {
      DataType element = ((ArrayType) type).elementType();
      Object[] values = new Object[v.size()];
      for (int i = 0; i < values.length; i++) values[i] = literal(element, v.get(i));
      return new GenericArrayData(values);
    }
    if (type instanceof MapType) {
      MapType m = (MapType) type;
      List<Object> keys = new ArrayList<>();
      List<Object> values = new ArrayList<>();
      if (v.isObject()) { // {"key": value}: keys given as text
        for (Iterator<Map.Entry<String, JsonNode>> it = v.properties().iterator(); it.hasNext(); ) {
          Map.Entry<String, JsonNode> e = it.next();
          keys.add(keyLiteral(m.keyType(), e.getKey()));
          values.add(literal(m.valueType(), e.getValue()));
        }
      } else { // [[key, value], ...]
        for (JsonNode pair : v) {
          keys.add(literal(m.keyType(), pair.get(0)));
          values.add(literal(m.valueType(), pair.get(1)));
        }
      }
      return new ArrayBasedMapData(new GenericArrayData(keys.toArray()), new GenericArrayData(values.toArray()));
    }
    if (type instanceof StructType) {
      StructField[] fields = ((StructType) type).fields();
      Object[] values = new Object[fields.length];
      for (int i = 0; i < fields.length; i++) {
        JsonNode f = v.isArray() ? v.get(i) : v.get(fields[i].name());
        values[i] = literal(fields[i].dataType(), f);
      }
      return new GenericInternalRow(values);
    }
    throw new IllegalArgumentException("no literal of type " + type.simpleString());
  }

  private static double number(JsonNode v) {
    if (v.isTextual()) { // JSON has no NaN or infinities
      switch (v.asText()) {
        case "NaN": return Double.NaN;
        case "Infinity": return Double.POSITIVE_INFINITY;
        case "-Infinity": return Double.NEGATIVE_INFINITY;
        default: return Double.parseDouble(v.asText());
      }
    }
    return v.asDouble();
  }

  private static Object keyLiteral(DataType type, String text) {
    if (type instanceof StringType) return UTF8String.fromString(text);
    try {
      return literal(type, Plan.JSON.readTree(text));
    } catch (IOException e) {
      return literal(type, Plan.JSON.getNodeFactory().textNode(text));
    }
  }
}
