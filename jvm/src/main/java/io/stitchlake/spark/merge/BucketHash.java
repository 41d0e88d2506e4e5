package io.stitchlake.spark.merge;

import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.StringType;

/**
 * The bucket of a key (stitchlake/layout/bucket.py, design.md §3): 64-bit FNV-1a over each key column's
 * length-prefixed canonical bytes (int, long and date as 8 little-endian bytes, strings as UTF-8), then
 * MurmurHash3's fmix64, modulo the bucket count. Pinned by the same test vectors as the Python one.
 */
public final class BucketHash {
  private static final long OFFSET = 0xCBF29CE484222325L;
  private static final long PRIME = 0x100000001B3L;

  private BucketHash() {}

  /** The bucket of the key in {@code row}'s columns {@code positions} (types {@code types}) among {@code buckets}. */
  public static int bucket(SpecializedGetters row, int[] positions, DataType[] types, int buckets) {
    long state = OFFSET;
    for (int c = 0; c < positions.length; c++) {
      DataType t = types[c];
      if (t instanceof StringType || t instanceof BinaryType) {
        byte[] bytes = t instanceof StringType ? row.getUTF8String(positions[c]).getBytes() : row.getBinary(positions[c]);
        state = feed(state, bytes.length, 4);
        for (byte b : bytes) state = (state ^ (b & 0xFF)) * PRIME;
      } else {
        long value = t instanceof IntegerType || t instanceof DateType ? row.getInt(positions[c]) : row.getLong(positions[c]);
        state = feed(feed(state, 8, 4), value, 8);
      }
    }
    return (int) Long.remainderUnsigned(fmix64(state), buckets);
  }

  /** The 64-bit hash of a key given as strings and numbers (the conformance harness checks the pinned vectors). */
  public static long hash(Object[] values) {
    long state = OFFSET;
    for (Object v : values) {
      if (v instanceof String) {
        byte[] bytes = ((String) v).getBytes(StandardCharsets.UTF_8);
        state = feed(state, bytes.length, 4);
        for (byte b : bytes) state = (state ^ (b & 0xFF)) * PRIME;
      } else {
        state = feed(feed(state, 8, 4), ((Number) v).longValue(), 8);
      }
    }
    return fmix64(state);
  }

  private static long feed(long state, long word, int width) {
    for (int shift = 0; shift < width; shift++) state = (state ^ ((word >>> (8 * shift)) & 0xFF)) * PRIME;
    return state;
  }

  static long fmix64(long h) {
    h ^= h >>> 33;
    h *= 0xFF51AFD7ED558CCDL;
    h ^= h >>> 33;
    h *= 0xC4CEB9FE1A85EC53L;
    return h ^ (h >>> 33);
  }
}
