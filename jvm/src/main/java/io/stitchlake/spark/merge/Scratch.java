package io.stitchlake.spark.merge;

import java.util.Arrays;

/**
 * The primitive arrays of a merge ({@link SliceMerger}, {@link KeyIndex}, {@link StreamMerge}), kept so that the
 * windows of one slice ({@link KeyWindows}) reuse them: a window's arrays are grown when it needs more and never
 * shrunk, so a slice's windows allocate them about once instead of once per window. A merge over a fresh scratch
 * allocates each array at its exact size, as before.
 *
 * <p>Arrays come back with what the window before left in them: a user clears (or writes before reading) every
 * element of [0, n) it reads; past n an array may be longer than asked. One merge at a time: a window's merged
 * batches or rows point into these arrays, so they must be used up before the next merge over the same scratch
 * (as {@link KeyWindows} does: the next window is read only after the one before is used).
 */
final class Scratch {
  // SliceMerger: per output ordinal the gathered columns' sources and rows; the batch's live keys; rule 7's.
  int[][] gatherSrc = new int[0][];
  int[][] gatherRows = new int[0][];
  int[] live;
  boolean[][] baseShows = new boolean[0][];
  int[] baseSegs;
  int[] baseRows;
  // KeyIndex: per segment its rows' ids and its first column as numbers; per key its first row.
  int[][] ids = new int[0][];
  long[][] keyLongs = new long[0][];
  int[] firstSeg;
  int[] firstRow;
  /** Per stream: the arrays of its {@link StreamMerge}. */
  Stream[] streams = new Stream[0];
  /** The version components a {@link StreamMerge} copies into arrays ({@link StreamMerge.Ver}), one pass at a time. */
  final Longs versions = new Longs();

  /** The arrays of one stream's merge: its winners, what it shows, its picks per selected column, its bests. */
  static final class Stream {
    int[] winSeg;
    int[] winRow;
    boolean[] shows;
    boolean[] hasTomb;
    boolean[] settled;
    int[][] pickSeg = new int[0][];
    int[][] pickRow = new int[0][];
    long[] best;
    long[] tomb;
    long[] cbest;
  }

  Stream stream(int s) {
    if (s >= streams.length) streams = Arrays.copyOf(streams, s + 1);
    if (streams[s] == null) streams[s] = new Stream();
    return streams[s];
  }

  /** A pool of long arrays handed out in turn from {@link #reset} on: each valid until the next reset. */
  static final class Longs {
    private long[][] arrays = new long[0][];
    private int used;

    void reset() {
      used = 0;
    }

    long[] take(int n) {
      if (used == arrays.length) arrays = Arrays.copyOf(arrays, Math.max(8, used * 2));
      long[] a = arrays[used] = longs(arrays[used], n);
      used++;
      return a;
    }
  }

  /** {@code have} when it holds n, else a new array: of n elements where there was none, else with room to grow. */
  static int[] ints(int[] have, int n) {
    return have != null && have.length >= n ? have : new int[have == null ? n : grown(n)];
  }

  static long[] longs(long[] have, int n) {
    return have != null && have.length >= n ? have : new long[have == null ? n : grown(n)];
  }

  static boolean[] booleans(boolean[] have, int n) {
    return have != null && have.length >= n ? have : new boolean[have == null ? n : grown(n)];
  }

  /** Grows {@code arrays} to hold index {@code i} (its new slots empty). */
  static int[][] slots(int[][] arrays, int i) {
    return i < arrays.length ? arrays : Arrays.copyOf(arrays, i + 1);
  }

  static long[][] slots(long[][] arrays, int i) {
    return i < arrays.length ? arrays : Arrays.copyOf(arrays, i + 1);
  }

  static boolean[][] slots(boolean[][] arrays, int i) {
    return i < arrays.length ? arrays : Arrays.copyOf(arrays, i + 1);
  }

  private static int grown(int n) {
    return (int) Math.min(Integer.MAX_VALUE - 8, n + (long) (n >> 3));
  }
}
