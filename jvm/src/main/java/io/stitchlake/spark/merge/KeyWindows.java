package io.stitchlake.spark.merge;

import io.stitchlake.spark.io.CorruptFileException;
import io.stitchlake.spark.io.FileBatches;
import io.stitchlake.spark.io.ViewVector;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.function.BiFunction;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A slice's merged batches or rows, window by window, when every file of it is in key order with one row per key (its
 * writer marks it so: {@link FileBatches#keyOrdered}). Each file streams through batches whose vectors its reader reuses; a
 * window takes from each file its rows up to the least of the files' current last keys, so all of a key's rows are in
 * the window that has any, and {@link SliceMerger} merges the window as it would the slice. A task then holds one
 * batch of each file instead of the slice decoded whole (docs/spark-reader.md, "Memory").
 *
 * <p>The order is checked as each batch is read (each key above the one before it in its file): a file marked but out
 * of order fails the read rather than merging a key in two windows.
 */
final class KeyWindows<T> implements Iterator<T> {
  /** A window's files merged as the slice's would be: batches ({@link SliceMerger#mergeBatches}) or rows. */
  private final BiFunction<List<FileData>, Scratch, Iterator<T>> mergeWindow;
  /** The merge's arrays, reused from one window to the next (each window is used up before the next is merged). */
  private final Scratch scratch = new Scratch();
  private final KeyOrder order;
  private final List<Source> sources;
  private Iterator<T> window = Collections.emptyIterator();

  /** One file of the slice: its batches, the current one and the first of its rows no window has taken. */
  private static final class Source {
    final FileData file;
    final FileBatches batches;
    final String path;
    final int[] keyAt;
    final ColumnVector[] keys;
    /** The key of the last row of the previous batch (its vectors are reused), to check the order across. */
    final ColumnVector[] last;
    boolean hasLast;
    ColumnarBatch current;
    /** The current batch's keys as numbers, where the key is one integral column without nulls (else null). */
    long[] longs;
    /** The array {@link #longs} reuses from batch to batch. */
    private long[] keptLongs;
    int start;
    int rows;
    boolean done;

    Source(FileData file, FileBatches batches, String path, int[] keyAt, KeyOrder order) {
      this.file = file;
      this.batches = batches;
      this.path = path;
      this.keyAt = keyAt;
      keys = new ColumnVector[keyAt.length];
      last = order.holder();
    }

    /** Moves to the file's next non-empty batch once this one is taken whole. */
    void fill(KeyOrder order) throws IOException {
      while (!done && start >= rows) {
        if (current != null && rows > 0) {
          order.copy(keys, rows - 1, last);
          hasLast = true;
        }
        if (!batches.next()) {
          done = true;
          current = null;
          return;
        }
        current = batches.get();
        start = 0;
        rows = current.numRows();
        for (int c = 0; c < keyAt.length; c++) keys[c] = current.column(keyAt[c]);
        longs = order.longs(keys, rows, keptLongs);
        if (longs != null) keptLongs = longs;
        checkOrder(order);
      }
    }

    /** Whether row {@code r}'s key is at most {@code bound}'s last key. */
    boolean upTo(int r, Source bound, KeyOrder order) {
      if (longs != null && bound.longs != null) return longs[r] <= bound.longs[bound.rows - 1];
      return order.compare(keys, r, bound.keys, bound.rows - 1) <= 0;
    }

    /** Whether this batch's last key is below {@code other}'s. */
    boolean endsBelow(Source other, KeyOrder order) {
      if (longs != null && other.longs != null) return longs[rows - 1] < other.longs[other.rows - 1];
      return order.compare(keys, rows - 1, other.keys, other.rows - 1) < 0;
    }

    /** Each key of the batch above the one before it (in this batch, or the last of the one before). */
    private void checkOrder(KeyOrder order) {
      for (int r = 0; r < rows; r++) {
        boolean above;
        if (r == 0) above = !hasLast || order.compare(keys, 0, last, 0) > 0;
        else if (longs != null) above = longs[r] > longs[r - 1];
        else above = order.compare(keys, r, keys, r - 1) > 0;
        if (!above) {
          throw new CorruptFileException(path, path + ": marked as in key order with one row per key, but a key does"
              + " not rise above the one before it: the file was changed after it was written");
        }
      }
    }

    /** Rows [start, end) of the current batch as the merge's file. */
    FileData take(int end) {
      ColumnarBatch rows;
      if (start == 0 && end == this.rows) {
        rows = current;
      } else {
        ColumnVector[] views = new ColumnVector[current.numCols()];
        for (int i = 0; i < views.length; i++) views[i] = ViewVector.from(current.column(i), start);
        rows = new ColumnarBatch(views, end - start);
      }
      start = end;
      return file.with(List.of(rows));
    }
  }

  /**
   * @param files the slice's files as {@link SliceInputs} opened them (base first, then logs in slice order)
   * @param mergeWindow merges a window's files over the given arrays; what it returns is used up before the next
   *     window is read (each item is valid until the next, as Spark reads them), since the files' vectors and the
   *     arrays then move on
   */
  KeyWindows(SliceMerger merger, List<SliceInputs.Opened> files,
      BiFunction<List<FileData>, Scratch, Iterator<T>> mergeWindow) {
    this.mergeWindow = mergeWindow;
    order = new KeyOrder(merger.commonTypes);
    sources = new ArrayList<>();
    for (SliceInputs.Opened f : files) {
      String[] names = merger.commonNames;
      int[] keyAt = new int[names.length];
      for (int c = 0; c < keyAt.length; c++) {
        keyAt[c] = f.data().column(names[c]);
        if (keyAt[c] < 0) throw new IllegalArgumentException("a file of the slice lacks key column " + names[c]);
      }
      sources.add(new Source(f.data(), f.batches(), f.file().path, keyAt, order));
    }
  }

  @Override
  public boolean hasNext() {
    try {
      while (!window.hasNext()) {
        if (!nextWindow()) return false;
      }
      return true;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public T next() {
    if (!hasNext()) throw new NoSuchElementException();
    return window.next();
  }

  /** The next window's merge (the batches of the one before have been used: their files may move on). */
  private boolean nextWindow() throws IOException {
    Source bound = null;
    for (Source s : sources) {
      s.fill(order);
      if (s.done) continue;
      if (bound == null || s.endsBelow(bound, order)) bound = s;
    }
    if (bound == null) return false;
    List<FileData> taken = new ArrayList<>(sources.size());
    for (Source s : sources) {
      if (s.done) continue;
      int end = s.start;
      while (end < s.rows && s.upTo(end, bound, order)) end++;
      if (end > s.start) taken.add(s.take(end));
    }
    window = mergeWindow.apply(taken, scratch);
    return true;
  }

  /**
   * The files' order of keys: key then partition columns, each ascending, nulls last (stitchlake/merge/stitch.py,
   * {@code key_order}: pyarrow's sort; strings by their UTF-8 bytes).
   */
  static final class KeyOrder {
    private static final int LONG = 0;
    private static final int INT = 1;
    private static final int STRING = 2;
    private final int[] kinds;
    private final DataType[] types;

    KeyOrder(DataType[] types) {
      this.types = types;
      kinds = new int[types.length];
      for (int c = 0; c < types.length; c++) kinds[c] = kind(types[c]);
    }

    /** The types a key or partition column may have (int, long, string, date: config/model.py). */
    private static int kind(DataType t) {
      if (t instanceof LongType) return LONG;
      if (t instanceof IntegerType || t instanceof DateType) return INT;
      if (t instanceof StringType) return STRING;
      return -1;
    }

    /** Whether keys of these types compare here as the writer sorted them. */
    static boolean supports(DataType[] types) {
      for (DataType t : types) if (kind(t) < 0) return false;
      return types.length > 0;
    }

    int compare(ColumnVector[] a, int ra, ColumnVector[] b, int rb) {
      for (int c = 0; c < kinds.length; c++) {
        ColumnVector x = a[c];
        ColumnVector y = b[c];
        boolean xn = x.isNullAt(ra);
        boolean yn = y.isNullAt(rb);
        if (xn || yn) {
          if (xn != yn) return xn ? 1 : -1;
          continue;
        }
        int d = switch (kinds[c]) {
          case LONG -> Long.compare(x.getLong(ra), y.getLong(rb));
          case INT -> Integer.compare(x.getInt(ra), y.getInt(rb));
          default -> x.getUTF8String(ra).binaryCompare(y.getUTF8String(rb));
        };
        if (d != 0) return d;
      }
      return 0;
    }

    /**
     * The keys of rows [0, rows) as numbers when the key is one integral column without nulls (in {@code into}
     * when it holds them, else a new array), else null.
     */
    long[] longs(ColumnVector[] keys, int rows, long[] into) {
      if (kinds.length != 1 || kinds[0] == STRING || keys[0].hasNull()) return null;
      ColumnVector v = keys[0];
      long[] out = Scratch.longs(into, rows);
      if (kinds[0] == LONG) {
        for (int r = 0; r < rows; r++) out[r] = v.getLong(r);
      } else {
        for (int r = 0; r < rows; r++) out[r] = v.getInt(r);
      }
      return out;
    }

    /** One-row vectors to keep a key in after its batch's vectors are reused. */
    ColumnVector[] holder() {
      ColumnVector[] out = new ColumnVector[types.length];
      for (int c = 0; c < out.length; c++) out[c] = new OnHeapColumnVector(1, types[c]);
      return out;
    }

    /** Copies the key of row {@code r} into {@code holder}'s row 0. */
    void copy(ColumnVector[] from, int r, ColumnVector[] holder) {
      for (int c = 0; c < kinds.length; c++) {
        OnHeapColumnVector to = (OnHeapColumnVector) holder[c];
        to.reset();
        if (from[c].isNullAt(r)) {
          to.putNull(0);
          continue;
        }
        to.putNotNull(0);
        switch (kinds[c]) {
          case LONG -> to.putLong(0, from[c].getLong(r));
          case INT -> to.putInt(0, from[c].getInt(r));
          default -> {
            byte[] bytes = from[c].getUTF8String(r).getBytes();
            to.putByteArray(0, bytes);
          }
        }
      }
    }
  }
}
