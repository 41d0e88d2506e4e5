package io.stitchlake.spark.merge;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The keys an incremental read of one file group may report, each numbered 0..n-1 in the order first added. Within
 * a group the partition is one, so a key is its key columns alone. A single integral key column (the common case)
 * is held in an open-addressing table of longs: no object per key, since a group's merge looks up every row it
 * returns.
 */
abstract class CandidateKeys {
  /** The number of {@code row}'s key, added if new. */
  abstract int add(SpecializedGetters row, int[] positions);

  /** The number of {@code row}'s key, or -1 when it is not a candidate. */
  abstract int find(SpecializedGetters row, int[] positions);

  abstract int size();

  static CandidateKeys of(DataType[] types) {
    if (types.length == 1 && (types[0] instanceof LongType || types[0] instanceof IntegerType
        || types[0] instanceof DateType)) {
      return new Longs(types[0] instanceof LongType);
    }
    return new Objects(types);
  }

  /** One long per key, in a table of twice the keys or more (linear probing). */
  private static final class Longs extends CandidateKeys {
    private final boolean wide;
    private long[] keys = new long[0];
    private int[] slots = new int[16];
    private int count;

    Longs(boolean wide) {
      this.wide = wide;
      Arrays.fill(slots, -1);
    }

    private long value(SpecializedGetters row, int[] positions) {
      return wide ? row.getLong(positions[0]) : row.getInt(positions[0]);
    }

    private int slot(long key) {
      int mask = slots.length - 1;
      int at = (int) (BucketHash.fmix64(key) & mask);
      while (slots[at] >= 0 && keys[slots[at]] != key) at = (at + 1) & mask;
      return at;
    }

    @Override
    int add(SpecializedGetters row, int[] positions) {
      long key = value(row, positions);
      int at = slot(key);
      if (slots[at] >= 0) return slots[at];
      if (count == keys.length) keys = Arrays.copyOf(keys, Math.max(16, count * 2));
      keys[count] = key;
      slots[at] = count;
      if (++count * 2 > slots.length) grow();
      return count - 1;
    }

    private void grow() {
      slots = new int[slots.length * 2];
      Arrays.fill(slots, -1);
      for (int i = 0; i < count; i++) slots[slot(keys[i])] = i;
    }

    @Override
    int find(SpecializedGetters row, int[] positions) {
      return slots[slot(value(row, positions))];
    }

    @Override
    int size() {
      return count;
    }
  }

  /** Any key: its values (longs, UTF-8 strings, bytes) in a list, in a hash map. */
  private static final class Objects extends CandidateKeys {
    private final DataType[] types;
    private final Map<List<Object>, Integer> numbers = new HashMap<>();

    Objects(DataType[] types) {
      this.types = types;
    }

    private List<Object> key(SpecializedGetters row, int[] positions, boolean keep) {
      Object[] values = new Object[positions.length];
      for (int c = 0; c < values.length; c++) {
        if (row.isNullAt(positions[c])) continue;
        Object v = row.get(positions[c], types[c]);
        if (v instanceof UTF8String && keep) v = ((UTF8String) v).copy();
        else if (v instanceof byte[]) v = ByteBuffer.wrap((byte[]) v);
        else if (v instanceof Integer) v = ((Integer) v).longValue();
        values[c] = v;
      }
      return Arrays.asList(values);
    }

    @Override
    int add(SpecializedGetters row, int[] positions) {
      List<Object> key = key(row, positions, false);
      Integer found = numbers.get(key);
      if (found != null) return found;
      key = key(row, positions, true); // kept: its text must outlive the batch it came from
      numbers.put(key, numbers.size());
      return numbers.size() - 1;
    }

    @Override
    int find(SpecializedGetters row, int[] positions) {
      Integer found = numbers.get(key(row, positions, false));
      return found == null ? -1 : found;
    }

    @Override
    int size() {
      return numbers.size();
    }
  }
}
