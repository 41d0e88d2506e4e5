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
    return values != null && markOwn(pos, values, isOwn) ? v.withFallback(own, isOwn) : v;
  }

  /** Marks the rows whose column version is null and value is not; whether there is one. */
  private static boolean markOwn(ColumnVector pos, ColumnVector values, boolean[] isOwn) {
    boolean any = false;
    for (int r = 0; r < isOwn.length; r++) {
      isOwn[r] = pos.isNullAt(r) && !values.isNullAt(r);
      any |= isOwn[r];
    }
    return any;
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
   * the output shows). Each pass over rows or keys is a method of its own: small methods reach the JIT's optimizing
   * compiler within a read, where one method holding every pass took it 1.8 s of compiling, measured on two cores
   * (docs/spark-reader.md, "Compiled early").
   */
  static StreamMerge of(StreamSpec stream, int[] selected, List<Segment> segments, KeyIndex keys, Scratch scratch,
      int index) {
    int n = keys.count;
    Scratch.Stream arrays = scratch.stream(index);
    scratch.versions.reset(); // the version copies live for this pass only
    StreamMerge m = new StreamMerge(stream, n, arrays, scratch.versions);
    boolean ignore = stream.ignoresNulls();
    int nSeg = segments.size();
    Ver[] own = new Ver[nSeg];
    Ver[] tombs = new Ver[nSeg];
    ColumnVector[] dels = new ColumnVector[nSeg];
    m.candidates(segments, ignore, own, tombs, dels);
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
      if (own[g] == null) continue;
      Segment seg = segments.get(g);
      int[] ids = keys.ids[g];
      any |= m.winners(own[g], g, seg, ids, best);
      Ver t = tombs[g];
      if (t != null && t.v[m.k + 1] != null) anyTomb |= m.tombstones(own[g], t, seg, ids, tomb, hasTomb);
    }
    if (!any) return m;
    m.shows = arrays.shows = Scratch.booleans(arrays.shows, n);
    m.markShown(n, dels);
    if (!ignore) return m;
    m.columnPicks(selected, segments, keys, own, arrays, tomb, hasTomb, anyTomb);
    return m;
  }

  /** nulls: ignore: per column, the greatest column version among non-null values newer than the tombstone. */
  private void columnPicks(int[] sel, List<Segment> segments, KeyIndex keys, Ver[] own, Scratch.Stream arrays,
      Best tomb, boolean[] hasTomb, boolean anyTomb) {
    int n = keys.count;
    int nSeg = segments.size();
    pickSeg = new int[sel.length][];
    pickRow = new int[sel.length][];
    Best cbest = new Best(isRanked, n, arrays.cbest = Scratch.longs(arrays.cbest, n * isRanked.length));
    boolean[] settled = arrays.settled = Scratch.booleans(arrays.settled, n); // set for every key below
    arrays.pickSeg = Scratch.slots(arrays.pickSeg, sel.length - 1);
    arrays.pickRow = Scratch.slots(arrays.pickRow, sel.length - 1);
    for (int p = 0; p < sel.length; p++) {
      String name = stream.columns.get(sel[p]).name;
      int[] segs = arrays.pickSeg[p] = Scratch.ints(arrays.pickSeg[p], n);
      int[] rows = arrays.pickRow[p] = Scratch.ints(arrays.pickRow[p], n); // written where segs is set
      Arrays.fill(segs, 0, n, -1);
      pickSeg[p] = segs;
      pickRow[p] = rows;
      ColumnVector[] values = new ColumnVector[nSeg];
      Ver[] cver = new Ver[nSeg];
      for (int g = 0; g < nSeg; g++) {
        if (own[g] == null) continue;
        Segment seg = segments.get(g);
        values[g] = seg.column(name);
        // A column the file predates carries the row's own version where its value is not null.
        cver[g] = seg.file.predates.contains(name) ? own[g] : columnVer(seg, name, values[g], own[g]);
      }
      Picks picks = new Picks(segs, rows, settled, hasTomb, tomb, cbest, anyTomb);
      if (settle(n, values, cver, own, picks) == 0) continue;
      for (int g = 0; g < nSeg; g++) {
        if (own[g] == null || values[g] == null) continue;
        pickFrom(g, segments.get(g), own[g], values[g], cver[g], keys.ids[g], picks);
      }
    }
  }

  /**
   * The stream's candidates per segment: base rows where its pos is not null, and every row of its own logs (their
   * versions, tombstones and delete flags).
   */
  private void candidates(List<Segment> segments, boolean ignore, Ver[] own, Ver[] tombs, ColumnVector[] dels) {
    for (int g = 0; g < own.length; g++) {
      Segment seg = segments.get(g);
      boolean base = seg.file.kind == FileData.Kind.BASE;
      if (!base && !stream.name.equals(seg.file.stream)) continue;
      Ver v = ver(seg, "");
      if (v.v[k + 1] == null) continue; // a base written before the stream existed: no groups
      own[g] = v;
      dels[g] = seg.column(stream.meta("del"));
      if (ignore) {
        // No tombstone in the segment (its versions all null): none to copy or to check row by row.
        ColumnVector tpos = seg.column(stream.meta("t__pos"));
        tombs[g] = tpos != null && allNull(tpos, seg.rows) ? null : ver(seg, "t__");
      }
    }
  }

  /** The winners' pass over one segment's rows; whether any row was the stream's candidate. */
  private boolean winners(Ver v, int g, Segment seg, int[] ids, Best best) {
    boolean base = seg.file.kind == FileData.Kind.BASE;
    ColumnVector pos = v.v[k + 1];
    boolean any = false;
    for (int r = 0; r < seg.rows; r++) {
      if (base && pos.isNullAt(r)) continue;
      int key = ids[r];
      any = true;
      if (winSeg[key] < 0 || compare(v, r, best, key) >= 0) { // ties: the later row wins
        winSeg[key] = g;
        winRow[key] = r;
        keep(v, r, best, key);
      }
    }
    return any;
  }

  /** nulls: ignore: the greatest tombstone per key over one segment's candidate rows; whether any was kept. */
  private boolean tombstones(Ver v, Ver t, Segment seg, int[] ids, Best tomb, boolean[] hasTomb) {
    boolean base = seg.file.kind == FileData.Kind.BASE;
    ColumnVector pos = v.v[k + 1];
    ColumnVector tpos = t.v[k + 1];
    boolean any = false;
    for (int r = 0; r < seg.rows; r++) {
      if (base && pos.isNullAt(r)) continue;
      if (tpos.isNullAt(r)) continue;
      int key = ids[r];
      if (!hasTomb[key] || compare(t, r, tomb, key) > 0) {
        hasTomb[key] = true;
        any = true;
        keep(t, r, tomb, key);
      }
    }
    return any;
  }

  /** Whether each key shows the stream: it has a winner whose delete flag is not set (a null flag reads false). */
  private void markShown(int n, ColumnVector[] dels) {
    for (int key = 0; key < n; key++) {
      int g = winSeg[key];
      if (g < 0) {
        shows[key] = false;
        continue;
      }
      ColumnVector d = dels[g];
      int r = winRow[key];
      shows[key] = !(d != null && !d.isNullAt(r) && d.getBoolean(r));
    }
  }

  /** One column's picks under way (nulls: ignore), and what they are judged against. */
  static final class Picks {
    final int[] seg;
    final int[] row;
    final boolean[] settled;
    final boolean[] hasTomb;
    final Best tomb;
    final Best best;
    final boolean anyTomb;

    Picks(int[] seg, int[] row, boolean[] settled, boolean[] hasTomb, Best tomb, Best best, boolean anyTomb) {
      this.seg = seg;
      this.row = row;
      this.settled = settled;
      this.hasTomb = hasTomb;
      this.tomb = tomb;
      this.best = best;
      this.anyTomb = anyTomb;
    }
  }

  /**
   * Where the row winner holds an eligible value of its own version, nothing can beat it (rules.py): those keys are
   * settled with it. The number of keys left open.
   */
  private int settle(int n, ColumnVector[] values, Ver[] cver, Ver[] own, Picks picks) {
    int open = 0;
    for (int key = 0; key < n; key++) {
      int g = winSeg[key];
      picks.settled[key] = false;
      if (g < 0) continue;
      int r = winRow[key];
      ColumnVector vals = values[g];
      boolean ok = vals != null && !vals.isNullAt(r)
          && (!picks.hasTomb[key] || compare(cver[g], r, picks.tomb, key) > 0)
          && equal(cver[g], own[g], r);
      if (ok) {
        picks.settled[key] = true;
        picks.seg[key] = g;
        picks.row[key] = r;
      } else {
        open++;
      }
    }
    return open;
  }

  /** The column's pass over one segment: for each open key, the greatest column version among non-null values. */
  private void pickFrom(int g, Segment seg, Ver v, ColumnVector vals, Ver c, int[] ids, Picks picks) {
    boolean base = seg.file.kind == FileData.Kind.BASE;
    ColumnVector pos = v.v[k + 1];
    for (int r = 0; r < seg.rows; r++) {
      if (base && pos.isNullAt(r)) continue;
      int key = ids[r];
      if (picks.settled[key] || vals.isNullAt(r)) continue;
      if (picks.anyTomb && picks.hasTomb[key] && compare(c, r, picks.tomb, key) <= 0) continue;
      if (picks.seg[key] < 0 || compare(c, r, picks.best, key) >= 0) {
        picks.seg[key] = g;
        picks.row[key] = r;
        keep(c, r, picks.best, key);
      }
    }
  }
}
