package io.stitchlake.spark.merge;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.JsonNode;
import io.stitchlake.spark.LogFreeReader;
import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.plan.MergeSpec;
import io.stitchlake.spark.plan.Plan;
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
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
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

/**
 * A harness for the merge without Spark's scan (tests/test_jvm_conformance.py): reads plan documents
 * (docs/spark-reader.md), one JSON line each on standard input ({@code {"plan": {...}}} or {@code {"plan_file":
 * path}}), reads every slice's Parquet files with Spark's vectorized reader, merges them with {@link SliceMerger}
 * and answers one JSON line per request: {@code {"ok": true, "rows": [[cell, ...], ...]}} in the plan's columns,
 * cells in a canonical form (floats as their bits, "NaN"; decimals as plain text; binary base64; dates and
 * timestamps as numbers; maps as [key, value] pairs; structs as lists), or {@code {"ok": false, "error": "..."}}.
 * One JVM serves many tables: startup costs seconds.
 *
 * <p>Files are read as a Spark task reads them: a slice with logs through {@link SliceInputs} (checksums and row
 * counts checked, widened types and columns a file predates as the table has them), a log-free slice through
 * {@link LogFreeReader}, the reader of every compacted and read-optimized read.
 */
public final class MergeMain {
  private MergeMain() {}

  public static void main(String[] args) throws IOException {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    Writer out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
    // One reader for every request: its Hadoop conf and per-column-set copies are made once, as in a task.
    Configuration hadoop = new Configuration();
    SQLConf sql = new SQLConf();
    sql.setConfString("spark.sql.session.timeZone", "UTC");
    DataFileReader.configure(hadoop, sql);
    // Rows per column batch (`--batch-rows N`, default a task's 4096), of the files read and of the merged output:
    // small batches make small files several segments each, the way a large file is read, put a slice's merged
    // rows in several batches, and spare allocating 4096-row vectors per column of each file.
    int batchRows = args.length >= 2 && args[0].equals("--batch-rows") ? Integer.parseInt(args[1]) : 4096;
    DataFileReader files = new DataFileReader(hadoop, batchRows);
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) continue;
      StringWriter buffer = new StringWriter();
      try (JsonGenerator g = Plan.JSON.getFactory().createGenerator(buffer)) {
        JsonNode request = Plan.JSON.readTree(line);
        if (request.has("hash")) {
          hashes(request.get("hash"), g);
          out.write(buffer.toString().replace('\n', ' '));
          out.write('\n');
          out.flush();
          continue;
        }
        String planText = request.has("plan_file") ? request.get("plan_file").asText() : request.get("plan").toString();
        long started = System.nanoTime();
        g.writeStartObject();
        g.writeBooleanField("ok", true);
        g.writeFieldName("rows");
        g.writeStartArray();
        int count = run(Plan.load(planText), files, batchRows, g);
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

  /** The bucket hash of each key ({@code {"hash": [[value, ...], ...]}}: strings and integers) as unsigned text. */
  private static void hashes(JsonNode keys, JsonGenerator g) throws IOException {
    g.writeStartObject();
    g.writeBooleanField("ok", true);
    g.writeArrayFieldStart("hashes");
    for (JsonNode key : keys) {
      Object[] values = new Object[key.size()];
      for (int i = 0; i < values.length; i++) {
        JsonNode v = key.get(i);
        values[i] = v.isTextual() ? v.asText() : (Object) v.asLong();
      }
      g.writeString(Long.toUnsignedString(BucketHash.hash(values)));
    }
    g.writeEndArray();
    g.writeEndObject();
    g.flush();
  }

  static int run(Plan plan, DataFileReader files, int batchRows, JsonGenerator g) throws IOException {
    MergeSpec spec = MergeSpec.parse(plan.mergeJson);
    StructType all = plan.schema();
    List<StructField> fields = new ArrayList<>();
    for (String name : plan.columns) fields.add(all.apply(name));
    if (plan.changes != null) {
      // As a Spark task of an incremental read: the change rows of each file group, change columns last.
      for (String name : ChangeFeed.COLUMNS) fields.add(DataTypes.createStructField(name, DataTypes.StringType, true));
      StructType output = new StructType(fields.toArray(new StructField[0]));
      ChangeFeed feed = new ChangeFeed(spec, all, files, plan.changes.keys, plan.changes.beforeImages);
      int count = 0;
      for (io.stitchlake.spark.plan.ChangeSlice slice : plan.changeSlices) {
        for (InternalRow row : feed.read(slice, output)) {
          writeRow(g, row, output);
          count++;
        }
      }
      return count;
    }
    StructType output = new StructType(fields.toArray(new StructField[0]));
    int count = 0;
    try (SliceInputs inputs = new SliceInputs(spec, all, files, null, Set.of())) {
      for (io.stitchlake.spark.plan.PlanSlice slice : plan.slices) {
        SliceMerger merger = new SliceMerger(spec, output);
        // As the Spark reader: a log-free slice by the log-free reader, a slice with logs into batches of gathered
        // columns for a flat output, rows otherwise.
        if (slice.logFree()) {
          try (LogFreeReader reader = new LogFreeReader(plan.merge, output, null, Set.of(), null, Set.of(), List.of(slice),
              files)) {
            while (reader.next()) {
              ColumnarBatch batch = reader.get();
              for (int i = 0; i < batch.numRows(); i++) writeRow(g, batch.getRow(i), output);
              count += batch.numRows();
            }
          }
        } else if (SliceMerger.flat(output)) {
          Iterator<ColumnarBatch> batches = inputs.mergeBatches(slice, merger, batchRows);
          while (batches.hasNext()) {
            ColumnarBatch batch = batches.next();
            for (int i = 0; i < batch.numRows(); i++) writeRow(g, batch.getRow(i), output);
            count += batch.numRows();
          }
        } else {
          Iterator<InternalRow> rows = inputs.mergeRows(slice, merger);
          while (rows.hasNext()) {
            writeRow(g, rows.next(), output);
            count++;
          }
        }
        inputs.release();
      }
    }
    return count;
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
