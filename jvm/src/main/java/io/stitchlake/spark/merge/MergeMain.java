package io.stitchlake.spark.merge;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.JsonNode;
import io.stitchlake.spark.plan.ColumnSpec;
import io.stitchlake.spark.plan.MergeSpec;
import io.stitchlake.spark.plan.Plan;
import io.stitchlake.spark.plan.StreamSpec;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.util.HadoopInputFile;
import org.apache.parquet.schema.Type;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.execution.datasources.parquet.VectorizedParquetRecordReader;
import org.apache.spark.sql.execution.vectorized.ColumnVectorUtils;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
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
 * A harness for the merge without Spark's scan (tests/test_jvm_conformance.py): reads plan documents
 * (docs/spark-reader.md), one JSON line each on standard input ({@code {"plan": {...}}} or {@code {"plan_file":
 * path}}), reads every slice's Parquet files with Spark's vectorized reader, merges them with {@link SliceMerger}
 * and answers one JSON line per request: {@code {"ok": true, "rows": [[cell, ...], ...]}} in the plan's columns,
 * cells in a canonical form (floats as their bits, "NaN"; decimals as plain text; binary base64; dates and
 * timestamps as numbers; maps as [key, value] pairs; structs as lists), or {@code {"ok": false, "error": "..."}}.
 * One JVM serves many tables: startup costs seconds.
 *
 * <p>Its file reader is a simple one (one row group per file; no checksum check): the production reader is
 * {@code io.stitchlake.spark.io}.
 */
public final class MergeMain {
  private MergeMain() {}

  public static void main(String[] args) throws IOException {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    Writer out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
    Configuration conf = new Configuration();
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) continue;
      StringWriter buffer = new StringWriter();
      try (JsonGenerator g = Plan.JSON.getFactory().createGenerator(buffer)) {
        JsonNode request = Plan.JSON.readTree(line);
        String planText = request.has("plan_file") ? request.get("plan_file").asText() : request.get("plan").toString();
        long started = System.nanoTime();
        g.writeStartObject();
        g.writeBooleanField("ok", true);
        g.writeFieldName("rows");
        g.writeStartArray();
        int count = run(Plan.load(planText), conf, g);
        g.writeEndArray();
        g.writeNumberField("count", count);
        g.writeNumberField("millis", (System.nanoTime() - started) / 1_000_000);
        g.writeEndObject();
      } catch (RuntimeException | IOException e) {
        buffer = new StringWriter();
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        try (JsonGenerator err = Plan.JSON.getFactory().createGenerator(buffer)) {
          err.writeStartObject();
          err.writeBooleanField("ok", false);
          err.writeStringField("error", e.toString());
          err.writeStringField("trace", trace.toString());
          err.writeEndObject();
        }
      }
      out.write(buffer.toString().replace('\n', ' '));
      out.write('\n');
      out.flush();
    }
  }

  static int run(Plan plan, Configuration conf, JsonGenerator g) throws IOException {
    MergeSpec spec = MergeSpec.parse(plan.mergeJson);
    StructType all = plan.schema();
    List<StructField> fields = new ArrayList<>();
    for (String name : plan.columns) fields.add(all.apply(name));
    StructType output = new StructType(fields.toArray(new StructField[0]));
    SliceMerger merger = new SliceMerger(spec, output);
    Map<String, DataType> types = columnTypes(spec);
    int count = 0;
    for (io.stitchlake.spark.plan.PlanSlice slice : plan.slices) {
      List<FileData> files = new ArrayList<>();
      if (slice.base != null) files.add(read(slice.base, merger.baseColumns(), spec, types, conf));
      boolean readOptimized = "read_optimized".equals(plan.mode);
      if (!readOptimized) {
        for (io.stitchlake.spark.plan.PlanFile log : slice.logs) {
          files.add(read(log, merger.logColumns(log.stream), spec, types, conf));
        }
      }
      Iterator<InternalRow> rows = merger.merge(files);
      while (rows.hasNext()) {
        writeRow(g, rows.next(), output);
        count++;
      }
    }
    return count;
  }

  /** Every column's table type by name, meta columns included (for absent ones and casts). */
  static Map<String, DataType> columnTypes(MergeSpec spec) {
    Map<String, DataType> out = new HashMap<>();
    for (ColumnSpec c : spec.common) out.put(c.name, Types.parse(c.type));
    for (StreamSpec s : spec.streams) {
      for (ColumnSpec c : s.columns) out.put(c.name, Types.parse(c.type));
    }
    return out;
  }

  private static DataType metaType(MergeSpec spec, String name) {
    for (StreamSpec s : spec.streams) {
      String prefix = "_sl__" + s.name + "__";
      if (!name.startsWith(prefix)) continue;
      String field = name.substring(prefix.length());
      if (field.equals("del")) return DataTypes.BooleanType;
      String last = field.substring(field.lastIndexOf("__") < 0 ? 0 : field.lastIndexOf("__") + 2);
      if (last.matches("o\\d+")) {
        StreamSpec.Ordering o = s.ordering.get(Integer.parseInt(last.substring(1)));
        return o.ranked ? Types.parse(o.type) : DataTypes.LongType;
      }
      return DataTypes.LongType;
    }
    return null;
  }

  static FileData read(io.stitchlake.spark.plan.PlanFile file, List<String> wanted, MergeSpec spec,
      Map<String, DataType> types, Configuration conf) throws IOException {
    Path path = new Path(file.path);
    Set<String> inFile = new HashSet<>();
    long total;
    try (ParquetFileReader footer = ParquetFileReader.open(HadoopInputFile.fromPath(path, conf))) {
      for (Type t : footer.getFileMetaData().getSchema().getFields()) inFile.add(t.getName());
      total = footer.getRecordCount();
      if (footer.getRowGroups().size() > 1) {
        throw new IllegalArgumentException(file.path + ": the harness reads files of one row group only");
      }
    }
    List<String> present = new ArrayList<>();
    for (String name : wanted) if (inFile.contains(name)) present.add(name);
    int rows = (int) total;
    FileData.Kind kind = file.isBase() ? FileData.Kind.BASE : FileData.Kind.LOG;
    if (rows == 0) return new FileData(kind, file.stream, file.commit, List.of(), new StructType(), Set.of());
    ColumnarBatch read = null;
    VectorizedParquetRecordReader reader = new VectorizedParquetRecordReader(false, Math.max(1, rows));
    if (rows > 0) {
      reader.initialize(file.path, present);
      reader.initBatch(new StructType(), new GenericInternalRow(0));
      if (!reader.nextBatch()) throw new IllegalStateException(file.path + ": no rows");
      read = reader.resultBatch();
    }
    // Not closed: closing frees the batch the merge reads (the harness process is short-lived).
    ColumnVector[] columns = new ColumnVector[wanted.size()];
    StructField[] fields = new StructField[wanted.size()];
    Set<String> predates = new HashSet<>();
    for (int i = 0; i < columns.length; i++) {
      String name = wanted.get(i);
      DataType target = types.get(name);
      int at = present.indexOf(name);
      if (at >= 0) {
        ColumnVector v = read.column(at);
        if (target != null && !target.sameType(v.dataType())) v = widen(v, target, rows);
        columns[i] = v;
      } else {
        if (target == null) target = metaType(spec, name);
        if (target == null) throw new IllegalArgumentException(file.path + ": no type for " + name);
        Object value = Types.literal(target, file.absent.get(name));
        if (types.containsKey(name)) predates.add(name); // a value column the file's schema lacks
        ConstantColumnVector c = new ConstantColumnVector(rows, target);
        ColumnVectorUtils.populate(c, new GenericInternalRow(new Object[] {value}), 0);
        columns[i] = c;
      }
      fields[i] = DataTypes.createStructField(name, columns[i].dataType(), true);
    }
    ColumnarBatch batch = new ColumnarBatch(columns, rows);
    return new FileData(kind, file.stream, file.commit, List.of(batch), new StructType(fields), predates);
  }

  /** A column stored under a narrower type, cast to the table's (int to long, float to double, decimals). */
  private static ColumnVector widen(ColumnVector v, DataType target, int rows) {
    OnHeapColumnVector out = new OnHeapColumnVector(rows, target);
    for (int r = 0; r < rows; r++) {
      if (v.isNullAt(r)) {
        out.putNull(r);
      } else if (target instanceof LongType) {
        out.putLong(r, v.dataType() instanceof IntegerType ? v.getInt(r) : v.getLong(r));
      } else if (target instanceof DoubleType) {
        out.putDouble(r, v.dataType() instanceof FloatType ? (double) v.getFloat(r) : v.getDouble(r));
      } else if (target instanceof DecimalType && v.dataType() instanceof DecimalType) {
        DecimalType from = (DecimalType) v.dataType();
        DecimalType to = (DecimalType) target;
        org.apache.spark.sql.types.Decimal d = v.getDecimal(r, from.precision(), from.scale()).clone();
        d.changePrecision(to.precision(), to.scale());
        out.putDecimal(r, d, to.precision());
      } else {
        throw new IllegalArgumentException("cannot widen " + v.dataType().simpleString() + " to " + target.simpleString());
      }
    }
    return out;
  }

  // ------------------------------------------------------------------------------------------ canonical JSON

  static void writeRow(JsonGenerator g, InternalRow row, StructType schema) throws IOException {
    g.writeStartArray();
    StructField[] fields = schema.fields();
    for (int i = 0; i < fields.length; i++) writeValue(g, row, i, fields[i].dataType());
    g.writeEndArray();
  }

  private static void writeValue(JsonGenerator g, SpecializedGetters data, int i, DataType t) throws IOException {
    if (data.isNullAt(i)) {
      g.writeNull();
    } else if (t instanceof BooleanType) {
      g.writeBoolean(data.getBoolean(i));
    } else if (t instanceof IntegerType || t instanceof DateType) {
      g.writeNumber(data.getInt(i));
    } else if (t instanceof LongType || t instanceof TimestampType) {
      g.writeNumber(data.getLong(i));
    } else if (t instanceof FloatType) {
      float f = data.getFloat(i);
      if (Float.isNaN(f)) g.writeString("NaN");
      else g.writeNumber(Float.floatToRawIntBits(f));
    } else if (t instanceof DoubleType) {
      double d = data.getDouble(i);
      if (Double.isNaN(d)) g.writeString("NaN");
      else g.writeNumber(Double.doubleToRawLongBits(d));
    } else if (t instanceof StringType) {
      g.writeString(data.getUTF8String(i).toString());
    } else if (t instanceof BinaryType) {
      g.writeString(Base64.getEncoder().encodeToString(data.getBinary(i)));
    } else if (t instanceof DecimalType) {
      DecimalType d = (DecimalType) t;
      g.writeString(data.getDecimal(i, d.precision(), d.scale()).toJavaBigDecimal().toPlainString());
    } else if (t instanceof ArrayType) {
      ArrayData a = data.getArray(i);
      g.writeStartArray();
      for (int j = 0; j < a.numElements(); j++) writeValue(g, a, j, ((ArrayType) t).elementType());
      g.writeEndArray();
    } else if (t instanceof MapType) {
      MapData m = data.getMap(i);
      MapType mt = (MapType) t;
      g.writeStartArray();
      for (int j = 0; j < m.numElements(); j++) {
        g.writeStartArray();
        writeValue(g, m.keyArray(), j, mt.keyType());
        writeValue(g, m.valueArray(), j, mt.valueType());
        g.writeEndArray();
      }
      g.writeEndArray();
    } else if (t instanceof StructType) {
      StructField[] fields = ((StructType) t).fields();
      InternalRow s = data.getStruct(i, fields.length);
      g.writeStartArray();
      for (int j = 0; j < fields.length; j++) writeValue(g, s, j, fields[j].dataType());
      g.writeEndArray();
    } else {
      throw new IllegalArgumentException("no canonical form for " + t.simpleString());
    }
  }
}
