package io.stitchlake.spark.merge;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.io.FileBatches;
import io.stitchlake.spark.plan.ChangeSlice;
import io.stitchlake.spark.plan.MergeSpec;
import io.stitchlake.spark.plan.PlanSlice;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
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
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * An incremental read of one file group (stitchlake/reading/changes.py, docs/spark-reader.md): the keys the
 * range's commits carried into the group are the candidates; the group's merged rows of them as of {@code until}
 * and as of {@code since} are compared, and each key whose row appeared ({@code I}), changed ({@code U}, or
 * {@code -U} then {@code +U} with before-images) or went ({@code D}) is one change row, with the completion time of
 * the last commit that carried it and the streams that did. Values compare as Spark compares them: NaN equals NaN.
 */
public final class ChangeFeed {
  public static final String OP = "_op";
  public static final String COMMIT_TIME = "_commit_time";
  public static final String STREAMS = "_streams";
  public static final List<String> COLUMNS = List.of(OP, COMMIT_TIME, STREAMS);

  private final MergeSpec spec;
  private final StructType table;
  private final DataFileReader files;
  private final boolean beforeImages;
  /** The common (key and partition) columns as the files and the merged rows hold them. */
  private final StructType common;
  private final int[] commonAt;
  /** The key columns' positions among the common ones, and their types, in the bucket hash's order. */
  private final int[] keyAt;
  private final DataType[] keyTypes;
  /** The key columns' positions in the table's columns (a merged row's). */
  private final int[] keyInTable;

  public ChangeFeed(MergeSpec spec, StructType table, DataFileReader files, List<String> keys, boolean beforeImages) {
    this.spec = spec;
    this.table = table;
    this.files = files;
    this.beforeImages = beforeImages;
    List<StructField> fields = new ArrayList<>();
    commonAt = new int[spec.common.size()];
    for (int c = 0; c < commonAt.length; c++) {
      String name = spec.common.get(c).name;
      commonAt[c] = table.fieldIndex(name);
      fields.add(table.fields()[commonAt[c]]);
    }
    common = new StructType(fields.toArray(new StructField[0]));
    keyAt = new int[keys.size()];
    keyTypes = new DataType[keys.size()];
    keyInTable = new int[keys.size()];
    for (int k = 0; k < keyAt.length; k++) {
      keyAt[k] = common.fieldIndex(keys.get(k));
      keyTypes[k] = common.fields()[keyAt[k]].dataType();
      keyInTable[k] = table.fieldIndex(keys.get(k));
    }
  }

  /** The candidates, and what carried each in the range: the last commit's completion time and the streams
   * (sorted). */
  private static final class Candidates {
    final CandidateKeys keys;
    final List<String> times = new ArrayList<>();
    final List<String> streams = new ArrayList<>();

    Candidates(CandidateKeys keys) {
      this.keys = keys;
    }

    void add(SpecializedGetters row, int[] positions, String commitTime, String stream) {
      int at = keys.add(row, positions);
      if (at == times.size()) {
        times.add(commitTime);
        streams.add(stream);
        return;
      }
      if (commitTime.compareTo(times.get(at)) > 0) times.set(at, commitTime);
      String had = streams.get(at);
      if (!had.equals(stream) && !("," + had + ",").contains("," + stream + ",")) {
        TreeSet<String> names = new TreeSet<>(List.of(had.split(",")));
        names.add(stream);
        streams.set(at, String.join(",", names));
      }
    }
  }

  /** The change rows of one file group, each in {@code output}'s columns, keys in the order the range carried
   * them (a key's {@code -U} row right before its {@code +U} row). */
  public List<InternalRow> read(ChangeSlice slice, StructType output) throws IOException {
    Candidates carried = new Candidates(CandidateKeys.of(keyTypes));
    for (ChangeSlice.Carried c : slice.carried) carriedKeys(slice, c, carried);
    for (List<String> row : slice.erased) {
      Object[] values = new Object[common.length()];
      for (int c = 0; c < values.length; c++) values[c] = Types.literal(common.fields()[c].dataType(), row.get(c));
      carried.add(new GenericInternalRow(values), keyAt, text(row.get(values.length)),
          text(row.get(values.length + 1)));
    }
    int n = carried.keys.size();
    if (n == 0) return List.of();
    // The state as of `since` is kept (copied); the one as of `until` is compared row by row as it is merged.
    InternalRow[] before = state(slice.before, carried.keys);
    InternalRow[][] changes = new InternalRow[n][];
    boolean[] live = new boolean[n];
    Rows out = new Rows(output);
    if (slice.after != null) {
      try (SliceInputs inputs = new SliceInputs(spec, table, files, null, Set.of())) {
        SliceMerger merger = new SliceMerger(spec, table);
        Iterator<InternalRow> rows = inputs.mergeRows(slice.after, merger);
        while (rows.hasNext()) {
          InternalRow now = rows.next();
          int key = carried.keys.find(now, keyInTable);
          if (key < 0) continue;
          live[key] = true;
          InternalRow then = before[key];
          String time = carried.times.get(key);
          String streams = carried.streams.get(key);
          if (then == null) {
            changes[key] = new InternalRow[] {out.row(now, "I", time, streams, true)};
          } else if (!same(now, then)) {
            InternalRow updated = out.row(now, beforeImages ? "+U" : "U", time, streams, true);
            changes[key] = beforeImages
                ? new InternalRow[] {out.row(then, "-U", time, streams, true), updated}
                : new InternalRow[] {updated};
          }
        }
      }
    }
    for (int key = 0; key < n; key++) {
      if (!live[key] && before[key] != null) {
        changes[key] = new InternalRow[] {
          out.row(before[key], "D", carried.times.get(key), carried.streams.get(key), beforeImages)
        };
      }
    }
    List<InternalRow> found = new ArrayList<>();
    for (InternalRow[] rows : changes) if (rows != null) found.addAll(List.of(rows));
    return found;
  }

  /** Adds the keys of one carried file that are in the group. */
  private void carriedKeys(ChangeSlice slice, ChangeSlice.Carried c, Candidates carried) throws IOException {
    boolean rehash = c.buckets != slice.buckets;
    int group = Integer.parseInt(slice.fileGroup);
    try (FileBatches batches = files.open(c.file, common, null, Set.of())) {
      while (batches.next()) {
        ColumnarBatch batch = batches.get();
        for (int r = 0; r < batch.numRows(); r++) {
          InternalRow row = batch.getRow(r);
          if (rehash && BucketHash.bucket(row, keyAt, keyTypes, slice.buckets) != group) continue;
          carried.add(row, keyAt, c.commitTime, c.stream);
        }
      }
    }
  }

  /** The merged rows of the candidates in {@code slices}, by candidate number (copied: the files are released). */
  private InternalRow[] state(Collection<PlanSlice> slices, CandidateKeys candidates) throws IOException {
    InternalRow[] out = new InternalRow[candidates.size()];
    try (SliceInputs inputs = new SliceInputs(spec, table, files, null, Set.of())) {
      for (PlanSlice slice : slices) {
        SliceMerger merger = new SliceMerger(spec, table);
        Iterator<InternalRow> rows = inputs.mergeRows(slice, merger);
        while (rows.hasNext()) {
          InternalRow row = rows.next();
          int at = candidates.find(row, keyInTable);
          if (at >= 0) out[at] = row.copy();
        }
        inputs.release();
      }
    }
    return out;
  }

  private boolean same(InternalRow now, InternalRow then) {
    StructField[] fields = table.fields();
    for (int i = 0; i < fields.length; i++) {
      if (!same(now, then, i, fields[i].dataType())) return false;
    }
    return true;
  }

  /** Both null, or equal values (nested ones compared whole), NaN equal to NaN. */
  static boolean same(SpecializedGetters a, SpecializedGetters b, int i, DataType t) {
    boolean aNull = a.isNullAt(i);
    boolean bNull = b.isNullAt(i);
    if (aNull || bNull) return aNull && bNull;
    if (t instanceof FloatType) {
      float x = a.getFloat(i);
      float y = b.getFloat(i);
      return x == y || (Float.isNaN(x) && Float.isNaN(y));
    }
    if (t instanceof DoubleType) {
      double x = a.getDouble(i);
      double y = b.getDouble(i);
      return x == y || (Double.isNaN(x) && Double.isNaN(y));
    }
    if (t instanceof LongType || t instanceof TimestampType) return a.getLong(i) == b.getLong(i);
    if (t instanceof IntegerType || t instanceof DateType) return a.getInt(i) == b.getInt(i);
    if (t instanceof BooleanType) return a.getBoolean(i) == b.getBoolean(i);
    if (t instanceof StringType) return a.getUTF8String(i).equals(b.getUTF8String(i));
    if (t instanceof BinaryType) return Arrays.equals(a.getBinary(i), b.getBinary(i));
    if (t instanceof DecimalType) {
      DecimalType d = (DecimalType) t;
      return a.getDecimal(i, d.precision(), d.scale()).equals(b.getDecimal(i, d.precision(), d.scale()));
    }
    if (t instanceof ArrayType) return sameElements(a.getArray(i), b.getArray(i), ((ArrayType) t).elementType());
    if (t instanceof MapType) {
      MapData x = a.getMap(i);
      MapData y = b.getMap(i);
      MapType m = (MapType) t;
      return sameElements(x.keyArray(), y.keyArray(), m.keyType())
          && sameElements(x.valueArray(), y.valueArray(), m.valueType());
    }
    if (t instanceof StructType) {
      StructField[] fields = ((StructType) t).fields();
      InternalRow x = a.getStruct(i, fields.length);
      InternalRow y = b.getStruct(i, fields.length);
      for (int f = 0; f < fields.length; f++) if (!same(x, y, f, fields[f].dataType())) return false;
      return true;
    }
    return a.get(i, t).equals(b.get(i, t));
  }

  private static boolean sameElements(ArrayData x, ArrayData y, DataType t) {
    if (x.numElements() != y.numElements()) return false;
    for (int j = 0; j < x.numElements(); j++) if (!same(x, y, j, t)) return false;
    return true;
  }

  private static String text(String json) {
    Object value = Types.literal(DataTypes.StringType, json);
    return value == null ? "" : value.toString();
  }

  /** A value that outlives the batch it was read from (a merged row points into the files' vectors). */
  private static Object kept(Object v) {
    if (v instanceof UTF8String) return ((UTF8String) v).copy();
    if (v instanceof ArrayData) return ((ArrayData) v).copy();
    if (v instanceof MapData) return ((MapData) v).copy();
    if (v instanceof InternalRow) return ((InternalRow) v).copy();
    if (v instanceof byte[]) return ((byte[]) v).clone();
    return v;
  }

  /** Change rows in the read's columns: table columns from a merged row, then the change columns. */
  private final class Rows {
    private final int[] from;
    private final DataType[] types;
    private final String[] change;
    private final boolean[] isCommon;

    Rows(StructType output) {
      StructField[] fields = output.fields();
      from = new int[fields.length];
      types = new DataType[fields.length];
      change = new String[fields.length];
      isCommon = new boolean[fields.length];
      for (int o = 0; o < fields.length; o++) {
        String name = fields[o].name();
        types[o] = fields[o].dataType();
        if (COLUMNS.contains(name)) {
          change[o] = name;
          from[o] = -1;
        } else {
          from[o] = table.fieldIndex(name);
          for (int at : commonAt) isCommon[o] |= at == from[o];
        }
      }
    }

    /** One change row of {@code row}'s values ({@code values} false: only its key and partition columns). */
    InternalRow row(InternalRow row, String op, String time, String streams, boolean values) {
      Object[] cells = new Object[from.length];
      for (int o = 0; o < cells.length; o++) {
        if (change != null && change[o] != null) {
          String cell = change[o].equals(OP) ? op : change[o].equals(COMMIT_TIME) ? time : streams;
          cells[o] = UTF8String.fromString(cell);
        } else if ((values || isCommon[o]) && !row.isNullAt(from[o])) {
          cells[o] = kept(row.get(from[o], types[o]));
        }
      }
      return new GenericInternalRow(cells);
    }
  }
}
