package io.stitchlake.spark.merge;

import java.util.Arrays;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Dense key ids over the common columns of a slice's rows (as stitchlake/merge/keys.py): the merge then works on
 * small integers. A slice is one partition's file group, so the partition columns are usually constant and the
 * key is often one long. Files are written in key order (stitchlake/merge/stitch.py, key_order; a rescale's base
 * in one run per old slice): where the first column is an integer, the slice's rising runs merge and ids come in
 * key order, so the merge's passes then meet each file's keys nearly in sequence. Otherwise (files written before
 * key order, a string key) a primitive hash map on the first integer column, checking only the other columns
 * against the key's first row; a mismatch (a real composite key) falls back to hashing every column.
 */
final class KeyIndex {
  /** ids[segment][row]: the row's key id. */
  final int[][] ids;
  int count;
  /** A row holding each key (its first): segment and row. */
  int[] firstSeg;
  int[] firstRow;

  private final ColumnVector[][] cols; // [segment][common column]
  private final int[] rows;
  private final DataType[] types;
  private final Scratch scratch;

  /**
   * {@code expected}: about how many keys the slice has (its largest file's rows), to size the first table;
   * {@code files[s]}: which file segment s was read from (a file's segments are consecutive); the arrays come from
   * {@code scratch} (each path writes every row's id and each key's first row before reading them).
   */
  KeyIndex(ColumnVector[][] cols, int[] rows, DataType[] types, int expected, int[] files, Scratch scratch) {
    this.cols = cols;
    this.rows = rows;
    this.types = types;
    this.scratch = scratch;
    this.ids = new int[rows.length][];
    scratch.ids = Scratch.slots(scratch.ids, rows.length - 1);
    for (int s = 0; s < rows.length; s++) ids[s] = scratch.ids[s] = Scratch.ints(scratch.ids[s], rows[s]);
    int total = 0;
    for (int r : rows) total += r;
    firstSeg = scratch.firstSeg = Scratch.ints(scratch.firstSeg, Math.max(16, total));
    firstRow = scratch.firstRow = Scratch.ints(scratch.firstRow, Math.max(16, total));
    boolean byFirst = types.length > 0 && integral(types[0]);
    if (!(byFirst && (bySortedRuns(files) || byFirstColumn(expected)))) byAllColumns(total);
  }

  /**
   * Up to this many runs, finding the smallest head by scanning every cursor once per key beats a heap popped once
   * per row (a slice of 12 logs at 1M keys: the aggregation's task CPU 0.31-0.33 s scanning against 0.40-0.44 s with
   * the heap); beyond it the heap's O(log runs) a row wins.
   */
  private static final int SCANNED_RUNS = 32;

  /** A slice cut into more rising runs than this many per file is not in key order: it takes the hash path. */
  private static final int RUNS_PER_FILE = 64;

  /**
   * Ids in key order from the slice's rows as sorted runs: stretches in which the first column rises strictly, a
   * new one at each file and wherever the value does not rise (a rescale's base file is one run per old slice it
   * took rows from). Per key, the smallest head among the runs' cursors, ties to the earlier run (so a key's first
   * row is its first in segment order, as on the hash paths). False where a value is null, the rows are not in key
   * order (too many runs), or another column tells two rows of one id apart; nothing is kept from it then.
   */
  private boolean bySortedRuns(int[] files) {
    int nSeg = rows.length;
    long[][] keys = new long[nSeg][];
    scratch.keyLongs = Scratch.slots(scratch.keyLongs, nSeg - 1);
    boolean isLong = types[0] instanceof LongType;
    Starts starts = new Starts(RUNS_PER_FILE * (nSeg == 0 ? 1 : files[nSeg - 1] + 1));
    for (int s = 0; s < nSeg; s++) {
      if (s > 0 && files[s] != files[s - 1]) starts.hasLast = false;
      ColumnVector v = cols[s][0];
      int n = rows[s];
      if (n > 0 && v.hasNull()) return false;
      long[] out = scratch.keyLongs[s] = Scratch.longs(scratch.keyLongs[s], n); // rows [0, n) written here
      copyKeys(v, n, out, isLong);
      if (!starts.add(out, n, s)) return false;
      keys[s] = out;
    }
    int runs = starts.count;
    Cursors at = new Cursors(runs, keys);
    for (int i = 0; i < runs; i++) {
      at.seg[i] = starts.seg[i];
      at.row[i] = starts.row[i];
      at.endSeg[i] = i + 1 < runs ? starts.seg[i + 1] : nSeg;
      at.endRow[i] = i + 1 < runs ? starts.row[i + 1] : 0;
      if (at.settle(i)) at.heap[at.size++] = i;
    }
    count = 0;
    return at.size <= SCANNED_RUNS ? scanned(at) : heaped(at);
  }

  /** Rows [0, n) of an integer column as longs (a pass of its own: a small method is compiled early). */
  private static void copyKeys(ColumnVector v, int n, long[] out, boolean isLong) {
    if (isLong) {
      for (int r = 0; r < n; r++) out[r] = v.getLong(r);
    } else {
      for (int r = 0; r < n; r++) out[r] = v.getInt(r);
    }
  }

  /** Where the slice's rising runs start (segment, row), found segment by segment. */
  private static final class Starts {
    int[] seg = new int[16];
    int[] row = new int[16];
    int count;
    boolean hasLast;
    long last;
    private final int most;

    Starts(int most) {
      this.most = most;
    }

    /** Segment s's keys; false past {@code most} runs (the rows are not in key order). */
    boolean add(long[] keys, int n, int s) {
      for (int r = 0; r < n; r++) {
        if (!hasLast || keys[r] <= last) {
          if (count == most) return false;
          if (count == seg.length) {
            seg = Arrays.copyOf(seg, count * 2);
            row = Arrays.copyOf(row, count * 2);
          }
          seg[count] = s;
          row[count++] = r;
        }
        last = keys[r];
        hasLast = true;
      }
      return true;
    }
  }

  /** The scan: {@code at.heap} holds the live runs in slice order. */
  private boolean scanned(Cursors at) {
    while (at.size > 0) {
      long key = at.head[at.heap[0]];
      for (int h = 1; h < at.size; h++) key = Math.min(key, at.head[at.heap[h]]);
      int id = count++;
      boolean first = true;
      for (int h = 0; h < at.size; ) {
        int i = at.heap[h];
        if (at.head[i] != key) {
          h++;
          continue;
        }
        if (!take(at, i, id, first)) return false;
        first = false;
        if (at.settle(i)) {
          h++;
        } else {
          System.arraycopy(at.heap, h + 1, at.heap, h, at.size - h - 1); // the file order stays
          at.size--;
        }
      }
    }
    return true;
  }

  /** The heap: {@code at.heap} a min-heap of runs by (head, run). */
  private boolean heaped(Cursors at) {
    for (int h = at.size / 2 - 1; h >= 0; h--) at.siftDown(h);
    while (at.size > 0) {
      long key = at.head[at.heap[0]];
      int id = count++;
      boolean first = true;
      do {
        int i = at.heap[0];
        if (!take(at, i, id, first)) return false;
        first = false;
        if (!at.settle(i)) at.heap[0] = at.heap[--at.size];
        if (at.size > 0) at.siftDown(0);
      } while (at.size > 0 && at.head[at.heap[0]] == key);
    }
    return true;
  }

  /** Gives run i's current row the id and moves the run on; false where another column tells it from the id. */
  private boolean take(Cursors at, int i, int id, boolean first) {
    int s = at.seg[i];
    int r = at.row[i];
    if (first) {
      firstSeg[id] = s;
      firstRow[id] = r;
    } else if (types.length > 1 && !sameOthers(s, r, firstSeg[id], firstRow[id])) {
      return false;
    }
    ids[s][r] = id;
    at.row[i]++;
    return true;
  }

  /** The runs' cursors for {@link #bySortedRuns}: per run its segment, row, end and head key; the live runs. */
  private final class Cursors {
    final int[] seg;
    final int[] row;
    final int[] endSeg; // where the next run starts (or one past the last segment)
    final int[] endRow;
    final long[] head;
    final int[] heap;
    int size;
    private final long[][] keys;

    Cursors(int runs, long[][] keys) {
      seg = new int[runs];
      row = new int[runs];
      endSeg = new int[runs];
      endRow = new int[runs];
      head = new long[runs];
      heap = new int[runs];
      this.keys = keys;
    }

    /** Moves run i past its exhausted segments; false when it has no row left, else loads its head. */
    boolean settle(int i) {
      while (true) {
        if (seg[i] > endSeg[i] || (seg[i] == endSeg[i] && row[i] >= endRow[i])) return false;
        if (row[i] < rows[seg[i]]) break;
        seg[i]++;
        row[i] = 0;
      }
      head[i] = keys[seg[i]][row[i]];
      return true;
    }

    private boolean before(int a, int b) {
      return head[a] < head[b] || (head[a] == head[b] && a < b);
    }

    void siftDown(int h) {
      int x = heap[h];
      while (true) {
        int c = 2 * h + 1;
        if (c >= size) break;
        if (c + 1 < size && before(heap[c + 1], heap[c])) c++;
        if (!before(heap[c], x)) break;
        heap[h] = heap[c];
        h = c;
      }
      heap[h] = x;
    }
  }

  private static boolean integral(DataType t) {
    return t instanceof LongType || t instanceof IntegerType || t instanceof DateType;
  }

  private static long mix(long h) {
    h ^= h >>> 33;
    h *= 0xff51afd7ed558ccdL;
    h ^= h >>> 33;
    h *= 0xc4ceb9fe1a85ec53L;
    h ^= h >>> 33;
    return h;
  }

  private long integer(int c, int s, int r) {
    ColumnVector v = cols[s][c];
    return types[c] instanceof LongType ? v.getLong(r) : v.getInt(r);
  }

  /**
   * Open addressing on the first column's long value; false when another column tells two rows apart. The table
   * starts at twice {@code expected} keys and doubles when half full: sized by the slice's rows (a key in every log)
   * it was several times the keys and most probes missed the CPU's caches.
   */
  private boolean byFirstColumn(int expected) {
    int cap = Integer.highestOneBit(Math.max(4, expected) * 2 - 1) << 1;
    long[] table = emptyTable(cap); // per slot: the key, then its id (-1: free); one cache line per probe
    count = 0;
    boolean more = types.length > 1;
    boolean isLong = types[0] instanceof LongType;
    for (int s = 0; s < rows.length; s++) {
      int[] out = ids[s];
      ColumnVector first = cols[s][0];
      for (int r = 0, n = rows[s]; r < n; r++) {
        if (count * 2 >= cap) {
          cap <<= 1;
          table = grown(table, cap);
        }
        int mask = cap - 1;
        long k = isLong ? first.getLong(r) : first.getInt(r);
        int slot = (int) mix(k) & mask;
        int id;
        while (true) {
          id = (int) table[2 * slot + 1];
          if (id < 0) {
            id = count++;
            table[2 * slot] = k;
            table[2 * slot + 1] = id;
            firstSeg[id] = s;
            firstRow[id] = r;
            break;
          }
          if (table[2 * slot] == k) break;
          slot = (slot + 1) & mask;
        }
        if (more && !sameOthers(s, r, firstSeg[id], firstRow[id])) return false;
        out[r] = id;
      }
    }
    return true;
  }

  private static long[] emptyTable(int cap) {
    long[] table = new long[2 * cap];
    for (int i = 1; i < table.length; i += 2) table[i] = -1;
    return table;
  }

  private static long[] grown(long[] table, int cap) {
    long[] out = emptyTable(cap);
    for (int i = 0; i < table.length; i += 2) {
      if (table[i + 1] < 0) continue;
      int slot = (int) mix(table[i]) & (cap - 1);
      while (out[2 * slot + 1] >= 0) slot = (slot + 1) & (cap - 1);
      out[2 * slot] = table[i];
      out[2 * slot + 1] = table[i + 1];
    }
    return out;
  }

  private boolean sameOthers(int s, int r, int s2, int r2) {
    for (int c = 1; c < types.length; c++) if (!same(c, s, r, s2, r2)) return false;
    return true;
  }

  private boolean same(int c, int s, int r, int s2, int r2) {
    ColumnVector a = cols[s][c];
    ColumnVector b = cols[s2][c];
    boolean na = a.isNullAt(r);
    boolean nb = b.isNullAt(r2);
    if (na || nb) return na == nb;
    DataType t = types[c];
    if (t instanceof StringType) return a.getUTF8String(r).equals(b.getUTF8String(r2));
    if (integral(t)) return integer(c, s, r) == integer(c, s2, r2);
    throw new IllegalArgumentException("key column of unsupported type " + t.simpleString());
  }

  private long hash(int s, int r) {
    long h = 17;
    for (int c = 0; c < types.length; c++) {
      ColumnVector v = cols[s][c];
      long x;
      if (v.isNullAt(r)) x = 0x9e3779b97f4a7c15L;
      else if (types[c] instanceof StringType) {
        UTF8String u = v.getUTF8String(r);
        x = u.hashCode();
      } else if (integral(types[c])) x = integer(c, s, r);
      else throw new IllegalArgumentException("key column of unsupported type " + types[c].simpleString());
      h = mix(h * 31 + x);
    }
    return h;
  }

  private void byAllColumns(int total) {
    int cap = Integer.highestOneBit(Math.max(4, total) * 2 - 1) << 1;
    int mask = cap - 1;
    int[] slots = new int[cap];
    long[] hashes = new long[cap];
    Arrays.fill(slots, -1);
    count = 0;
    for (int s = 0; s < rows.length; s++) {
      int[] out = ids[s];
      for (int r = 0, n = rows[s]; r < n; r++) {
        long h = hash(s, r);
        int slot = (int) h & mask;
        int id;
        while (true) {
          id = slots[slot];
          if (id < 0) {
            id = count++;
            slots[slot] = id;
            hashes[slot] = h;
            firstSeg[id] = s;
            firstRow[id] = r;
            break;
          }
          if (hashes[slot] == h && sameAll(s, r, firstSeg[id], firstRow[id])) break;
          slot = (slot + 1) & mask;
        }
        out[r] = id;
      }
    }
  }

  private boolean sameAll(int s, int r, int s2, int r2) {
    for (int c = 0; c < types.length; c++) if (!same(c, s, r, s2, r2)) return false;
    return true;
  }
}
