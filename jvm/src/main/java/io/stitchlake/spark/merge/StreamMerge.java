package io.stitchlake.spark.merge;

import io.stitchlake.spark.plan.StreamSpec;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One stream's part of a slice's merge (docs/spark-reader.md, "The merge rules"): per key the greatest version
 * among the stream's candidates, ties going to the later row, whether the key shows the stream, and for a
 * {@code nulls: ignore} stream the row each shown column takes its value from. {@link SliceMerger} turns the
 * streams' outcomes into rows.
 */
final class StreamMerge {
  final StreamSpec stream;
  final int k;
  final boolean[] isRanked; // per component: k ordering, commit, pos
  final int[] winSeg;
  final int[] winRow;
  boolean[] shows;
  int[][] pickSeg; // ignore: per selected column
  int[][] pickRow;
  /** Where {@link Ver} copies version components to (for the pass of {@link #of} only). */
  private final Scratch.Longs pool;

  /** {@code arrays}: where the winners' arrays come from (each used for keys [0, keys) only). */
  StreamMerge(StreamSpec stream, int keys, Scratch.Stream arrays, Scratch.Longs pool) {
    this.stream = stream;
    this.k = stream.ordering.size();
    this.pool = pool;
    isRanked = new boolean[k + 2];
    for (int i = 0; i < k; i++) isRanked[i] = stream.ordering.get(i).ranked;
    winSeg = arrays.winSeg = Scratch.ints(arrays.winSeg, keys);
    winRow = arrays.winRow = Scratch.ints(arrays.winRow, keys); // written where winSeg is set
    Arrays.fill(winSeg, 0, keys, -1);
  }

  Ver ver(Segment seg, String prefix) {
    ColumnVector[] v = new ColumnVector[k + 2];
    for (int i = 0; i < k; i++) v[i] = seg.column(stream.meta(prefix + "o" + i));
    boolean base = seg.file.kind == FileData.Kind.BASE;
    v[k] = base ? seg.column(stream.meta(prefix + "commit")) : null;
    v[k + 1] = seg.column(stream.meta(prefix + "pos"));
    return new Ver(v, seg.file.commit, isRanked, seg.rows, pool);
  }

  /**
   * The version a column's value came from in one segment: its {@code c__<column>__} columns, and where those are
   * null (a file of format 2 writes them only where they differ) the row's own version {@code own}. A segment
   * whose column versions are all null is {@code own} itself, which {@link #equal} then settles at once.
   */
  Ver columnVer(Segment seg, String column, ColumnVector values, Ver own) {
    ColumnVector pos = seg.column(stream.meta("c__" + column + "__pos"));
    if (pos != null && allNull(pos, seg.rows)) return own;
    Ver v = ver(seg, "c__" + column + "__"); // a missing column fails where the version is used, naming it
    if (pos == null || !pos.hasNull()) return v;
    // The rows whose value has the row's version (format 1 has none: its versions are null where values are).
    boolean[] isOwn = new boolean[seg.rows];
    boolean any = false;
    for (int r = 0; r < seg.rows; r++) {
      isOwn[r] = pos.isNullAt(r) && values != null && !values.isNullAt(r);
      any |= isOwn[r];
    }
    return any ? v.withFallback(own, isOwn) : v;
  }

  private static boolean allNull(ColumnVector v, int rows) {
    if (!v.hasNull()) return rows == 0;
    for (int r = 0; r < rows; r++) if (!v.isNullAt(r)) return false;
    return true;
  }

  Object rankedValue(Ver a, int c, int row) {
    if (a.fallback != null && a.fallback.own[row]) a = a.fallback.ver;
    return rankedValue(a.v[c], row);
  }

  Object rankedValue(ColumnVector v, int row) {
    if (v.isNullAt(row)) return null;
    DataType t = v.dataType();
    if (t instanceof StringType) return v.getUTF8String(row);
    if (t instanceof BinaryType) return v.getBinary(row);
    if (t instanceof DecimalType) {
      DecimalType d = (DecimalType) t;
      return v.getDecimal(row, d.precision(), d.scale());
    }
    throw new IllegalArgumentException("ranked ordering of type " + t.simpleString());
  }

  long longValue(Ver a, int c, int row) {
    long[] values = a.longs[c];
    if (values == null) {
      if (c == k) return a.commit;
      throw new IllegalStateException("stream " + stream.name + ": a version column is missing");
    }
    return values[row]; // as summary._numpy: a null component reads 0 (Ver copied it so)
  }

  /** Compares the version at {@code row} of {@code a} with the best of {@code key}. */
  int compare(Ver a, int row, Best best, int key) {
    int at = key * best.width;
    for (int c = 0; c < isRanked.length; c++) {
      if (isRanked[c]) {
        int cmp = compareRanked(rankedValue(a, c, row), best.ranked[c][key]);
        if (cmp != 0) return cmp;
      } else {
        long x = longValue(a, c, row);
        long y = best.longs[at + c];
        if (x != y) return x < y ? -1 : 1;
      }
    }
    return 0;
  }

  /** Whether two versions of the same segment row are equal component by component. */
  boolean equal(Ver a, Ver b, int row) {
    if (a == b) return true;
    for (int c = 0; c < isRanked.length; c++) {
      if (isRanked[c]) {
        if (compareRanked(rankedValue(a, c, row), rankedValue(b, c, row)) != 0) return false;
      } else if (longValue(a, c, row) != longValue(b, c, row)) {
        return false;
      }
    }
    return true;
  }

  void keep(Ver a, int row, Best best, int key) {
    int at = key * best.width;
    for (int c = 0; c < isRanked.length; c++) {
      if (isRanked[c]) best.ranked[c][key] = rankedValue(a, c, row);
      else best.longs[at + c] = longValue(a, c, row);
    }
  }

  /**
   * A version's components in one segment: ordering values, commit (a column, or the log's constant), pos. The
   * long components are copied once into arrays ({@code longs[c]}, a null read as 0 as summary._numpy reads it;
   * null for a ranked component or the log's constant commit): the passes compare each row's version several
   * times, and a vector read per component (dictionary-decoded, through a virtual call) cost more than the copy.
   */
  static final class Ver {
    final ColumnVector[] v;
    final long commit;
    final long[][] longs;
    /** Rows whose version is another's (a column version left null: the row's own), or null: none. */
    final Fallback fallback;

    Ver(ColumnVector[] v, long commit, boolean[] isRanked, int rows, Scratch.Longs pool) {
      this.v = v;
      this.commit = commit;
      this.fallback = null;
      longs = new long[v.length][];
      for (int c = 0; c < v.length; c++) {
        if (isRanked[c] || v[c] == null) continue;
        longs[c] = longsOf(v[c], rows, pool.take(rows));
      }
    }

    private Ver(Ver of, long[][] longs, Fallback fallback) {
      this.v = of.v;
      this.commit = of.commit;
      this.longs = longs;
      this.fallback = fallback;
    }

    /** This version, but {@code own} in the rows {@code isOwn} marks. */
    Ver withFallback(Ver own, boolean[] isOwn) {
      int rows = isOwn.length;
      long[][] merged = new long[longs.length][];
      for (int c = 0; c < longs.length; c++) {
        if (longs[c] == null) continue;
        long[] mine = own.longs[c];
        long[] out = Arrays.copyOf(longs[c], rows);
        for (int r = 0; r < rows; r++) if (isOwn[r]) out[r] = mine[r];
        merged[c] = out;
      }
      return new Ver(this, merged, new Fallback(own, isOwn));
    }
  }

  /** Where a column version falls back to the row's own (ranked components are read from it there). */
  static final class Fallback {
    final Ver ver;
    final boolean[] own;

    Fallback(Ver ver, boolean[] own) {
      this.ver = ver;
      this.own = own;
    }
  }

  /** Rows [0, rows) of {@code v} into {@code out}, a null as 0. */
  private static long[] longsOf(ColumnVector v, int rows, long[] out) {
    if (v.hasNull()) {
      for (int r = 0; r < rows; r++) out[r] = v.isNullAt(r) ? 0 : v.getLong(r);
    } else {
      for (int r = 0; r < rows; r++) out[r] = v.getLong(r);
    }
    return out;
  }

  /**
   * The greatest version so far per key: long components by value, key by key in one array ({@code longs[key *
   * width + c]}, so that a key's components share a cache line: the passes visit keys in file order, which is not
   * key order), ranked ones as Spark values.
   */
  static final class Best {
    final int width;
    final long[] longs;
    final Object[][] ranked;

    /** {@code longs} holds keys * width: a key's components are read only once {@link #keep} wrote them. */
    Best(boolean[] isRanked, int keys, long[] longs) {
      width = isRanked.length;
      this.longs = longs;
      ranked = new Object[isRanked.length][];
      for (int c = 0; c < isRanked.length; c++) if (isRanked[c]) ranked[c] = new Object[keys];
    }
  }

  @SuppressWarnings("unchecked")
  private static int compareRanked(Object x, Object y) {
    if (x == null || y == null) return x == null ? (y == null ? 0 : -1) : 1;
    if (x instanceof UTF8String) return ((UTF8String) x).binaryCompare((UTF8String) y);
    if (x instanceof byte[]) return Arrays.compareUnsigned((byte[]) x, (byte[]) y);
    return ((Decimal) x).compare((Decimal) y);
  }

  /**
   * One stream's winners per key (and, nulls: ignore, its per-column picks of {@code selected}, the value columns
   * the output shows).
   */
  static StreamMerge of(StreamSpec stream, int[] selected, List<Segment> segments, KeyIndex keys, Scratch scratch,
      int index) {
    int n = keys.count;
    Scratch.Stream arrays = scratch.stream(index);
    scratch.versions.reset(); // the version copies live for this pass only
    StreamMerge m = new StreamMerge(stream, n, arrays, scratch.versions);
    boolean ignore = stream.ignoresNulls();
    int nSeg = segments.size();
    // The stream's candidates: base rows where its pos is not null, and every row of its own logs.
    Ver[] own = new Ver[nSeg];
    Ver[] tombs = new Ver[nSeg];
    ColumnVector[] dels = new ColumnVector[nSeg];
    for (int g = 0; g < nSeg; g++) {
      Segment seg = segments.get(g);
      boolean base = seg.file.kind == FileData.Kind.BASE;
      if (!base && !stream.name.equals(seg.file.stream)) continue;
      Ver v = m.ver(seg, "");
      if (v.v[m.k + 1] == null) continue; // a base written before the stream existed: no groups
      own[g] = v;
      dels[g] = seg.column(stream.meta("del"));
      if (ignore) {
        // No tombstone in the segment (its versions all null): none to copy or to check row by row.
        ColumnVector tpos = seg.column(stream.meta("t__pos"));
        tombs[g] = tpos != null && allNull(tpos, seg.rows) ? null : m.ver(seg, "t__");
      }
    }
    int width = m.isRanked.length;
    Best best = new Best(m.isRanked, n, arrays.best = Scratch.longs(arrays.best, n * width));
    Best tomb = ignore ? new Best(m.isRanked, n, arrays.tomb = Scratch.longs(arrays.tomb, n * width)) : null;
    boolean[] hasTomb = null;
    if (ignore) {
      hasTomb = arrays.hasTomb = Scratch.booleans(arrays.hasTomb, n);
      Arrays.fill(hasTomb, 0, n, false);
    }
    boolean anyTomb = false;
    boolean any = false;
    for (int g = 0; g < nSeg; g++) {
      Ver v = own[g];
      if (v == null) continue;
      Segment seg = segments.get(g);
      boolean base = seg.file.kind == FileData.Kind.BASE;
      ColumnVector pos = v.v[m.k + 1];
      int[] ids = keys.ids[g];
      Ver t = ignore ? tombs[g] : null;
      ColumnVector tpos = t == null ? null : t.v[m.k + 1];
      for (int r = 0; r < seg.rows; r++) {
        if (base && pos.isNullAt(r)) continue;
        int key = ids[r];
        any = true;
        if (m.winSeg[key] < 0 || m.compare(v, r, best, key) >= 0) { // ties: the later row wins
          m.winSeg[key] = g;
          m.winRow[key] = r;
          m.keep(v, r, best, key);
        }
        if (tpos != null && !tpos.isNullAt(r)) {
          if (!hasTomb[key] || m.compare(t, r, tomb, key) > 0) {
            hasTomb[key] = true;
            anyTomb = true;
            m.keep(t, r, tomb, key);
          }
        }
      }
    }
    if (!any) return m;
    m.shows = arrays.shows = Scratch.booleans(arrays.shows, n);
    for (int key = 0; key < n; key++) {
      int g = m.winSeg[key];
      if (g < 0) {
        m.shows[key] = false;
        continue;
      }
      ColumnVector d = dels[g];
      int r = m.winRow[key];
      boolean deleted = d != null && !d.isNullAt(r) && d.getBoolean(r); // del null reads as false
      m.shows[key] = !deleted;
    }
    if (!ignore) return m;

    // nulls: ignore: per column, the greatest column version among non-null values newer than the tombstone.
    int[] sel = selected;
    m.pickSeg = new int[sel.length][];
    m.pickRow = new int[sel.length][];
    Best cbest = new Best(m.isRanked, n, arrays.cbest = Scratch.longs(arrays.cbest, n * width));
    boolean[] settled = arrays.settled = Scratch.booleans(arrays.settled, n); // set for every key below
    arrays.pickSeg = Scratch.slots(arrays.pickSeg, sel.length - 1);
    arrays.pickRow = Scratch.slots(arrays.pickRow, sel.length - 1);
    for (int p = 0; p < sel.length; p++) {
      String name = stream.columns.get(sel[p]).name;
      int[] pickSeg = arrays.pickSeg[p] = Scratch.ints(arrays.pickSeg[p], n);
      int[] pickRow = arrays.pickRow[p] = Scratch.ints(arrays.pickRow[p], n); // written where pickSeg is set
      Arrays.fill(pickSeg, 0, n, -1);
      m.pickSeg[p] = pickSeg;
      m.pickRow[p] = pickRow;
      ColumnVector[] values = new ColumnVector[nSeg];
      Ver[] cver = new Ver[nSeg];
      for (int g = 0; g < nSeg; g++) {
        if (own[g] == null) continue;
        Segment seg = segments.get(g);
        values[g] = seg.column(name);
        // A column the file predates carries the row's own version where its value is not null.
        cver[g] = seg.file.predates.contains(name) ? own[g] : m.columnVer(seg, name, values[g], own[g]);
      }
      // Where the row winner holds an eligible value of its own version, nothing can beat it (rules.py).
      int open = 0;
      for (int key = 0; key < n; key++) {
        int g = m.winSeg[key];
        settled[key] = false;
        if (g < 0) continue;
        int r = m.winRow[key];
        ColumnVector vals = values[g];
        boolean ok = vals != null && !vals.isNullAt(r)
            && (!hasTomb[key] || m.compare(cver[g], r, tomb, key) > 0)
            && m.equal(cver[g], own[g], r);
        if (ok) {
          settled[key] = true;
          pickSeg[key] = g;
          pickRow[key] = r;
        } else {
          open++;
        }
      }
      if (open == 0) continue;
      for (int g = 0; g < nSeg; g++) {
        Ver v = own[g];
        ColumnVector vals = values[g];
        if (v == null || vals == null) continue;
        Segment seg = segments.get(g);
        boolean base = seg.file.kind == FileData.Kind.BASE;
        ColumnVector pos = v.v[m.k + 1];
        Ver c = cver[g];
        int[] ids = keys.ids[g];
        for (int r = 0; r < seg.rows; r++) {
          if (base && pos.isNullAt(r)) continue;
          int key = ids[r];
          if (settled[key] || vals.isNullAt(r)) continue;
          if (anyTomb && hasTomb[key] && m.compare(c, r, tomb, key) <= 0) continue;
          if (pickSeg[key] < 0 || m.compare(c, r, cbest, key) >= 0) {
            pickSeg[key] = g;
            pickRow[key] = r;
            m.keep(c, r, cbest, key);
          }
        }
      }
    }
    return m;
  }
}
