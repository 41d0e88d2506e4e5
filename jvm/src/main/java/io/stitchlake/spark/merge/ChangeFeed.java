package io.stitchlake.spark.merge;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.io.FileBatches;
import io.stitchlake.spark.plan.ChangeSlice;
import io.stitchlake.spark.plan.MergeSpec;
import io.stitchlake.spark.plan.PlanSlice;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
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
    for (int k = 0; k < keyAt.length; k++) {
      keyAt[k] = common.fieldIndex(keys.get(k));
      keyTypes[k] = common.fields()[keyAt[k]].dataType();
    }
  }

  /** What carried a key in the range: the last commit's completion time and the streams. */
  private static final class Carry {
    String time = "";
    final TreeSet<String> streams = new TreeSet<>();

    void add(String commitTime, String stream) {
      if (commitTime.compareTo(time) > 0) time = commitTime;
      streams.add(stream);
    }
  }

  /** The change rows of one file group, in key order, each in {@code output}'s columns. */
  public List<InternalRow> read(ChangeSlice slice, StructType output) throws IOException {
    Map<Key, Carry> carried = new HashMap<>();
    for (ChangeSlice.Carried c : slice.carried) carriedKeys(slice, c, carried);
    for (List<String> row : slice.erased) {
      Object[] values = new Object[common.length()];
      for (int c = 0; c < values.length; c++) values[c] = Types.literal(common.fields()[c].dataType(), row.get(c));
      Key key = Key.of(new GenericInternalRow(values), identity(values.length), commonTypes());
      carried.computeIfAbsent(key, k -> new Carry()).add(text(row.get(values.length)), text(row.get(values.length + 1)));
    }
    if (carried.isEmpty()) return List.of();
    Map<Key, InternalRow> after = state(slice.after == null ? List.of() : List.of(slice.after), carried.keySet());
    Map<Key, InternalRow> before = state(slice.before, carried.keySet());
    List<Key> keys = new ArrayList<>(carried.keySet());
    keys.sort(null);
    Rows out = new Rows(output);
    for (Key key : keys) {
      InternalRow now = after.get(key);
      InternalRow then = before.get(key);
      Carry carry = carried.get(key);
      if (now != null && then == null) {
        out.add(now, "I", carry, true);
      } else if (now != null && !same(now, then)) {
        if (beforeImages) out.add(then, "-U", carry, true);
        out.add(now, beforeImages ? "+U" : "U", carry, true);
      } else if (now == null && then != null) {
        out.add(then, "D", carry, beforeImages);
      }
    }
    return out.rows;
  }

  /** Adds the keys of one carried file that are in the group. */
  private void carriedKeys(ChangeSlice slice, ChangeSlice.Carried c, Map<Key, Carry> carried) throws IOException {
    boolean rehash = c.buckets != slice.buckets;
    int group = Integer.parseInt(slice.fileGroup);
    int[] all = identity(common.length());
    DataType[] types = commonTypes();
    try (FileBatches batches = files.open(c.file, common, null, Set.of(), false)) {
      while (batches.next()) {
        ColumnarBatch batch = batches.get();
        for (int r = 0; r < batch.numRows(); r++) {
          InternalRow row = batch.getRow(r);
          if (rehash && BucketHash.bucket(row, keyAt, keyTypes, slice.buckets) != group) continue;
          carried.computeIfAbsent(Key.of(row, all, types), k -> new Carry()).add(c.commitTime, c.stream);
        }
      }
    }
  }

  /** The merged rows of the candidates in {@code slices}, by key (copied: the files are released). */
  private Map<Key, InternalRow> state(Collection<PlanSlice> slices, Set<Key> candidates) throws IOException {
    Map<Key, InternalRow> out = new HashMap<>();
    DataType[] types = commonTypes();
    try (SliceInputs inputs = new SliceInputs(spec, table, files, null, Set.of())) {
      for (PlanSlice slice : slices) {
        SliceMerger merger = new SliceMerger(spec, table);
        Iterator<InternalRow> rows = merger.merge(inputs.read(slice, merger));
        while (rows.hasNext()) {
          InternalRow row = rows.next();
          Key key = Key.of(row, commonAt, types);
          if (candidates.contains(key)) out.put(key, row.copy());
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

  private DataType[] commonTypes() {
    DataType[] out = new DataType[common.length()];
    for (int c = 0; c < out.length; c++) out[c] = common.fields()[c].dataType();
    return out;
  }

  private static int[] identity(int n) {
    int[] out = new int[n];
    for (int i = 0; i < n; i++) out[i] = i;
    return out;
  }

  private static String text(String json) {
    Object value = Types.literal(DataTypes.StringType, json);
    return value == null ? "" : value.toString();
  }

  /** Change rows in the read's columns: table columns from a merged row, then the change columns. */
  private final class Rows {
    final List<InternalRow> rows = new ArrayList<>();
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
    void add(InternalRow row, String op, Carry carry, boolean values) {
      Object[] cells = new Object[from.length];
      for (int o = 0; o < cells.length; o++) {
        if (change != null && change[o] != null) {
          String cell = change[o].equals(OP) ? op : change[o].equals(COMMIT_TIME) ? carry.time
              : String.join(",", carry.streams);
          cells[o] = UTF8String.fromString(cell);
        } else if ((values || isCommon[o]) && !row.isNullAt(from[o])) {
          cells[o] = row.get(from[o], types[o]);
        }
      }
      rows.add(new GenericInternalRow(cells));
    }
  }

  /** A key: the common columns' values, hashable and ordered (numbers, then text and bytes by their bytes). */
  static final class Key implements Comparable<Key> {
    private final Object[] values;
    private final int hash;

    private Key(Object[] values) {
      this.values = values;
      this.hash = Arrays.hashCode(values);
    }

    static Key of(SpecializedGetters row, int[] positions, DataType[] types) {
      Object[] values = new Object[positions.length];
      for (int c = 0; c < values.length; c++) {
        if (row.isNullAt(positions[c])) continue;
        Object v = row.get(positions[c], types[c]);
        if (v instanceof UTF8String) v = ((UTF8String) v).copy();
        else if (v instanceof byte[]) v = ByteBuffer.wrap(((byte[]) v).clone());
        else if (v instanceof Integer || v instanceof Short || v instanceof Byte) v = ((Number) v).longValue();
        values[c] = v;
      }
      return new Key(values);
    }

    @Override
    public boolean equals(Object other) {
      return other instanceof Key && hash == ((Key) other).hash && Arrays.equals(values, ((Key) other).values);
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    @SuppressWarnings({"unchecked", "rawtypes"})
    public int compareTo(Key other) {
      for (int c = 0; c < values.length; c++) {
        Object a = values[c];
        Object b = other.values[c];
        if (a == null || b == null) {
          if (a != b) return a == null ? -1 : 1;
          continue;
        }
        int cmp = a instanceof Comparable ? ((Comparable) a).compareTo(b) : a.toString().compareTo(b.toString());
        if (cmp != 0) return cmp;
      }
      return 0;
    }
  }
}
