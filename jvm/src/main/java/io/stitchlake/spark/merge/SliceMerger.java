package io.stitchlake.spark.merge;

import io.stitchlake.spark.io.GatherVector;
import io.stitchlake.spark.io.Literals;
import io.stitchlake.spark.io.ViewVector;
import io.stitchlake.spark.plan.ColumnSpec;
import io.stitchlake.spark.plan.MergeSpec;
import io.stitchlake.spark.plan.StreamSpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Merges one file slice (a base file and its logs) into the slice's live wide rows, with the rules of
 * docs/spark-reader.md ("The merge rules"); stitchlake/merge (rules.py, summary.py, stitch.py) is the reference.
 *
 * <p>Keys get dense ids ({@link KeyIndex}); then each stream's pass ({@link StreamMerge}) keeps each key's greatest
 * version among its candidates (the base rows where the stream has a group, then its logs, in slice order) and, for
 * a {@code nulls: ignore} stream, the row each column takes its value from. Here the streams' outcomes become rows
 * ({@link MergedRow}) or batches of gathered columns ({@link GatherVector}), views onto the chosen vectors.
 */
public final class SliceMerger {
  private final MergeSpec spec;
  private final StructType output;
  private final DataType[] outTypes;
  /** Key then partition columns: their types and names (the windows compare keys by them: {@link KeyWindows}). */
  final DataType[] commonTypes;
  final String[] commonNames;
  /** Per output ordinal: a common column index, or -1. */
  private final int[] outCommon;
  /** Per output ordinal: a stream index and its column index, or -1. */
  private final int[] outStream;
  private final int[] outColumn;
  private final Object[] outDefault;
  /** Per output ordinal: the default as the plan's JSON (null: none), for the batches' constant vectors. */
  private final String[] outDefaultJson;
  /** Per stream: the value columns the output shows (indices into its columns), in stream order. */
  private final int[][] selected;

  public SliceMerger(MergeSpec spec, StructType output) {
    this.spec = spec;
    this.output = output;
    int n = output.fields().length;
    outTypes = new DataType[n];
    outCommon = new int[n];
    outStream = new int[n];
    outColumn = new int[n];
    outDefault = new Object[n];
    outDefaultJson = new String[n];
    commonNames = new String[spec.common.size()];
    commonTypes = new DataType[spec.common.size()];
    for (int c = 0; c < commonNames.length; c++) {
      commonNames[c] = spec.common.get(c).name;
      commonTypes[c] = Types.parse(spec.common.get(c).type);
    }
    List<List<Integer>> chosen = new ArrayList<>();
    for (int s = 0; s < spec.streams.size(); s++) chosen.add(new ArrayList<>());
    for (int o = 0; o < n; o++) {
      StructField field = output.fields()[o];
      outTypes[o] = field.dataType();
      outCommon[o] = -1;
      outStream[o] = -1;
      for (int c = 0; c < commonNames.length; c++) if (commonNames[c].equals(field.name())) outCommon[o] = c;
      for (int s = 0; s < spec.streams.size() && outCommon[o] < 0; s++) {
        List<ColumnSpec> columns = spec.streams.get(s).columns;
        for (int j = 0; j < columns.size(); j++) {
          if (columns.get(j).name.equals(field.name())) {
            outStream[o] = s;
            outColumn[o] = j;
            outDefault[o] = Types.literal(field.dataType(), columns.get(j).defaultJson);
            outDefaultJson[o] = columns.get(j).defaultJson;
            chosen.get(s).add(j);
          }
        }
      }
      if (outCommon[o] < 0 && outStream[o] < 0) {
        throw new IllegalArgumentException("column " + field.name() + " is neither a key, a partition column nor a"
            + " stream's column");
      }
    }
    selected = new int[spec.streams.size()][];
    for (int s = 0; s < selected.length; s++) {
      selected[s] = chosen.get(s).stream().mapToInt(Integer::intValue).sorted().distinct().toArray();
    }
  }

  /**
   * Whether a read of {@code output} is merged into batches ({@link #mergeBatches}) rather than rows: every column
   * flat (no struct, array or map). The Spark reader and the conformance harness decide with this one rule.
   */
  public static boolean flat(StructType output) {
    for (StructField f : output.fields()) {
      DataType t = f.dataType();
      if (t instanceof StructType || t instanceof ArrayType || t instanceof MapType) return false;
    }
    return true;
  }

  // ------------------------------------------------------------------------------------------ columns to read

  private static List<String> versionFields(StreamSpec stream, String prefix, boolean withCommit) {
    List<String> out = new ArrayList<>();
    for (int i = 0; i < stream.ordering.size(); i++) out.add(stream.meta(prefix + "o" + i));
    if (withCommit) out.add(stream.meta(prefix + "commit"));
    out.add(stream.meta(prefix + "pos"));
    return out;
  }

  private List<String> metaFields(int s, boolean withCommit) {
    StreamSpec stream = spec.streams.get(s);
    List<String> out = versionFields(stream, "", withCommit);
    out.add(stream.meta("del"));
    if (stream.ignoresNulls()) {
      out.addAll(versionFields(stream, "t__", withCommit));
      for (int j : selected[s]) out.addAll(versionFields(stream, "c__" + stream.columns.get(j).name + "__", withCommit));
    }
    return out;
  }

  /** The columns to read from a base file for this output: common, shown values and every stream's meta. */
  public List<String> baseColumns() {
    List<String> out = new ArrayList<>(Arrays.asList(commonNames));
    for (int s = 0; s < selected.length; s++) {
      for (int j : selected[s]) out.add(spec.streams.get(s).columns.get(j).name);
      out.addAll(metaFields(s, true));
    }
    return out;
  }

  /** The columns to read from a log of {@code stream} for this output (no commit: it is the file's). */
  public List<String> logColumns(String stream) {
    List<String> out = new ArrayList<>(Arrays.asList(commonNames));
    int s = streamIndex(stream);
    if (s < 0) return out;
    for (int j : selected[s]) out.add(spec.streams.get(s).columns.get(j).name);
    out.addAll(metaFields(s, false));
    return out;
  }

  private int streamIndex(String name) {
    for (int s = 0; s < spec.streams.size(); s++) if (spec.streams.get(s).name.equals(name)) return s;
    return -1;
  }

  // ------------------------------------------------------------------------------------------ the merge

  /** The live wide rows of one slice (files: base first if any, then logs in slice order), in output's order. */
  public Iterator<InternalRow> merge(List<FileData> files) {
    return merge(files, new Scratch());
  }

  /** {@link #merge} over {@code scratch}'s arrays: the rows must be used up before its next merge. */
  Iterator<InternalRow> merge(List<FileData> files, Scratch scratch) {
    List<Segment> segments = new ArrayList<>();
    boolean anyLog = segments(files, segments);
    if (segments.isEmpty()) return Collections.emptyIterator();
    return anyLog ? merged(segments, scratch) : baseRows(segments);
  }

  /**
   * The same rows as {@link #merge}, in batches of at most {@code batchRows} rows whose columns are views onto the
   * chosen vectors ({@link GatherVector}): what the Spark reader hands Spark, which then reads only the columns a
   * query uses, without building a row per merged row. One batch object is refilled: use each before the next.
   */
  public Iterator<ColumnarBatch> mergeBatches(List<FileData> files, int batchRows) {
    return mergeBatches(files, batchRows, new Scratch());
  }

  /** {@link #mergeBatches} over {@code scratch}'s arrays: the batches must be used up before its next merge. */
  Iterator<ColumnarBatch> mergeBatches(List<FileData> files, int batchRows, Scratch scratch) {
    List<Segment> segments = new ArrayList<>();
    boolean anyLog = segments(files, segments);
    if (segments.isEmpty()) return Collections.emptyIterator();
    return anyLog ? mergedBatches(segments, batchRows, scratch) : baseBatches(segments, batchRows, scratch);
  }

  /** Fills {@code segments} with every non-empty batch of {@code files}; whether a live stream's log is among them. */
  private boolean segments(List<FileData> files, List<Segment> segments) {
    boolean anyLog = false;
    for (FileData f : files) {
      if (f.kind == FileData.Kind.LOG) {
        // A log of a stream not in the config is a dropped stream's: hidden (the planner refuses unknown ones).
        if (streamIndex(f.stream) < 0) continue;
        anyLog = true;
      }
      for (ColumnarBatch b : f.batches) if (b.numRows() > 0) segments.add(new Segment(f, b, f.index));
    }
    return anyLog;
  }

  private ColumnVector[][] outputVectors(List<Segment> segments) {
    ColumnVector[][] out = new ColumnVector[outTypes.length][segments.size()];
    for (int o = 0; o < outTypes.length; o++) {
      String name = output.fields()[o].name();
      for (int g = 0; g < segments.size(); g++) out[o][g] = segments.get(g).column(name);
    }
    return out;
  }

  /** Rule 7: a base file alone holds one merged row per key; a stream shows where its del is false. */
  private Iterator<InternalRow> baseRows(List<Segment> segments) {
    int nStreams = spec.streams.size();
    ColumnVector[][] vectors = outputVectors(segments);
    MergedRow row = new MergedRow(outTypes);
    return new Iterator<InternalRow>() {
      int g = 0;
      int r = -1;
      final boolean[] shows = new boolean[nStreams];
      ColumnVector[] dels = dels(segments.get(0));
      boolean ready;

      ColumnVector[] dels(Segment seg) {
        ColumnVector[] out = new ColumnVector[nStreams];
        for (int s = 0; s < nStreams; s++) out[s] = seg.column(spec.streams.get(s).meta("del"));
        return out;
      }

      boolean advance() {
        while (true) {
          r++;
          if (r >= segments.get(g).rows) {
            g++;
            r = 0;
            if (g >= segments.size()) return false;
            dels = dels(segments.get(g));
          }
          boolean alive = false;
          for (int s = 0; s < nStreams; s++) {
            ColumnVector d = dels[s];
            shows[s] = d != null && !d.isNullAt(r) && !d.getBoolean(r);
            alive |= shows[s];
          }
          if (alive) return true;
        }
      }

      @Override public boolean hasNext() {
        if (!ready) ready = g < segments.size() && advance();
        return ready;
      }

      @Override public InternalRow next() {
        if (!hasNext()) throw new NoSuchElementException();
        ready = false;
        for (int o = 0; o < outTypes.length; o++) {
          if (outStream[o] >= 0 && !shows[outStream[o]]) row.constant(o, outDefault[o]);
          else if (vectors[o][g] == null) row.constant(o, null);
          else row.set(o, vectors[o][g], r);
        }
        return row;
      }
    };
  }

  /** Where each live key's cells come from, per output ordinal (see {@link #picks}). */
  private static final class Picks {
    int keys;
    StreamMerge[] merges;
    ColumnVector[][] vectors;
    int[][] segOf;
    int[][] rowOf;
    boolean[][] showsOf;
    boolean[] none;

    boolean live(int key) {
      for (StreamMerge m : merges) if (m.shows != null && m.shows[key]) return true;
      return false;
    }
  }

  private Picks picks(List<Segment> segments, Scratch scratch) {
    int nSeg = segments.size();
    ColumnVector[][] keyCols = new ColumnVector[nSeg][commonNames.length];
    int[] rows = new int[nSeg];
    int[] files = new int[nSeg];
    Map<FileData, Integer> fileRows = new HashMap<>();
    for (int g = 0; g < nSeg; g++) {
      Segment seg = segments.get(g);
      rows[g] = seg.rows;
      files[g] = g == 0 ? 0 : files[g - 1] + (seg.file == segments.get(g - 1).file ? 0 : 1);
      fileRows.merge(seg.file, seg.rows, Integer::sum);
      for (int c = 0; c < commonNames.length; c++) {
        keyCols[g][c] = seg.column(commonNames[c]);
        if (keyCols[g][c] == null) throw new IllegalArgumentException("a file of the slice lacks key column " + commonNames[c]);
      }
    }
    int largestFile = fileRows.values().stream().mapToInt(Integer::intValue).max().orElse(0);
    KeyIndex keys = new KeyIndex(keyCols, rows, commonTypes, largestFile, files, scratch);
    Picks p = new Picks();
    p.keys = keys.count;
    p.merges = new StreamMerge[spec.streams.size()];
    for (int s = 0; s < p.merges.length; s++) {
      p.merges[s] = StreamMerge.of(spec.streams.get(s), selected[s], segments, keys, scratch, s);
    }
    p.vectors = outputVectors(segments);
    // Per output ordinal: where each key's cell comes from (segment and row arrays by key), and the stream's
    // shows-by-key (null for a common column); none: the stream never shows here, the cell is its default.
    int outs = outTypes.length;
    p.segOf = new int[outs][];
    p.rowOf = new int[outs][];
    p.showsOf = new boolean[outs][];
    p.none = new boolean[outs];
    for (int o = 0; o < outs; o++) {
      int s = outStream[o];
      if (s < 0) {
        p.segOf[o] = keys.firstSeg;
        p.rowOf[o] = keys.firstRow;
        continue;
      }
      StreamMerge m = p.merges[s];
      if (m.shows == null) {
        p.none[o] = true;
        continue;
      }
      p.showsOf[o] = m.shows;
      if (m.pickSeg != null) {
        int i = Arrays.binarySearch(selected[s], outColumn[o]);
        p.segOf[o] = m.pickSeg[i];
        p.rowOf[o] = m.pickRow[i];
      } else {
        p.segOf[o] = m.winSeg;
        p.rowOf[o] = m.winRow;
      }
    }
    return p;
  }

  private Iterator<InternalRow> merged(List<Segment> segments, Scratch scratch) {
    Picks p = picks(segments, scratch);
    int n = p.keys;
    int outs = outTypes.length;
    ColumnVector[][] vectors = p.vectors;
    int[][] segOf = p.segOf;
    int[][] rowOf = p.rowOf;
    boolean[][] showsOf = p.showsOf;
    boolean[] none = p.none;
    MergedRow row = new MergedRow(outTypes);
    return new Iterator<InternalRow>() {
      int key = -1;
      boolean ready;

      boolean advance() {
        while (++key < n) if (p.live(key)) return true;
        return false;
      }

      @Override public boolean hasNext() {
        if (!ready) ready = key < n && advance();
        return ready;
      }

      @Override public InternalRow next() {
        if (!hasNext()) throw new NoSuchElementException();
        ready = false;
        for (int o = 0; o < outs; o++) {
          boolean[] shows = showsOf[o];
          if (none[o] || (shows != null && !shows[key])) {
            row.constant(o, outDefault[o]);
            continue;
          }
          int g = segOf[o][key];
          ColumnVector v = g < 0 ? null : vectors[o][g];
          if (v == null) row.constant(o, null);
          else row.set(o, v, rowOf[o][key]);
        }
        return row;
      }
    };
  }

  /**
   * The output columns of one slice's batches: per ordinal a {@link GatherVector} over the slice's segments'
   * vectors (a segment whose file lacks the column shows null), then the column's default, then null.
   */
  private final class Gather {
    final int defaults;
    final int nulls;
    final GatherVector[] columns;
    /**
     * Per output ordinal and segment: the row of the gathered vector where the segment's rows start. A window's
     * range of a file batch ({@link KeyWindows}) is gathered from the batch itself, so that Spark's reads meet the
     * file's own vectors (a dictionary-encoded one decoded once per entry: {@link GatherVector}), not a view.
     */
    final int[][] offsets;
    final ColumnarBatch batch;

    Gather(ColumnVector[][] vectors, int nSeg, int batchRows, Scratch scratch) {
      defaults = nSeg;
      nulls = nSeg + 1;
      columns = new GatherVector[outTypes.length];
      offsets = new int[outTypes.length][nSeg];
      scratch.gatherSrc = Scratch.slots(scratch.gatherSrc, outTypes.length - 1);
      scratch.gatherRows = Scratch.slots(scratch.gatherRows, outTypes.length - 1);
      for (int o = 0; o < outTypes.length; o++) {
        ColumnVector none = Literals.constant(1, outTypes[o], null);
        ColumnVector[] sources = new ColumnVector[nSeg + 2];
        for (int g = 0; g < nSeg; g++) {
          ColumnVector v = vectors[o][g];
          if (v instanceof ViewVector view) {
            v = view.rangeOf();
            offsets[o][g] = view.offset();
          }
          sources[g] = v != null ? v : none;
        }
        sources[defaults] = outStream[o] < 0 ? none : Literals.constant(1, outTypes[o], outDefaultJson[o]);
        sources[nulls] = none;
        // Written for rows [0, m) before each batch is handed out: the window before's values are never read.
        int[] src = scratch.gatherSrc[o] = Scratch.ints(scratch.gatherSrc[o], batchRows);
        int[] rows = scratch.gatherRows[o] = Scratch.ints(scratch.gatherRows[o], batchRows);
        columns[o] = new GatherVector(sources, src, rows);
      }
      batch = new ColumnarBatch(columns);
    }

    /** Ordinal {@code o} shows its default in rows [0, m). */
    void fillDefault(int o, int m) {
      Arrays.fill(columns[o].src, 0, m, defaults);
      Arrays.fill(columns[o].rows, 0, m, 0);
    }

    ColumnarBatch ready(int m) {
      batch.setNumRows(m);
      return batch;
    }
  }

  private Iterator<ColumnarBatch> mergedBatches(List<Segment> segments, int batchRows, Scratch scratch) {
    Picks p = picks(segments, scratch);
    Gather gather = new Gather(p.vectors, segments.size(), batchRows, scratch);
    int[] live = scratch.live = Scratch.ints(scratch.live, batchRows);
    return new Iterator<ColumnarBatch>() {
      int key = 0;
      int m = -1; // rows of the next batch, -1 until looked for

      @Override public boolean hasNext() {
        if (m < 0) {
          m = 0;
          for (; key < p.keys && m < batchRows; key++) if (p.live(key)) live[m++] = key;
        }
        return m > 0;
      }

      @Override public ColumnarBatch next() {
        if (!hasNext()) throw new NoSuchElementException();
        for (int o = 0; o < outTypes.length; o++) {
          if (p.none[o]) {
            gather.fillDefault(o, m);
            continue;
          }
          int[] src = gather.columns[o].src;
          int[] rows = gather.columns[o].rows;
          boolean[] shows = p.showsOf[o];
          int[] segOf = p.segOf[o];
          int[] rowOf = p.rowOf[o];
          int[] offset = gather.offsets[o];
          for (int i = 0; i < m; i++) {
            int k = live[i];
            int g = shows != null && !shows[k] ? gather.defaults : segOf[k];
            if (g < 0) g = gather.nulls; // an ignore stream's column with no value: null
            src[i] = g;
            rows[i] = g < gather.defaults ? rowOf[k] + offset[g] : 0;
          }
        }
        int rows = m;
        m = -1;
        return gather.ready(rows);
      }
    };
  }

  /** Rule 7 in batches: the base rows where some stream's del is false, as {@link #baseRows}. */
  private Iterator<ColumnarBatch> baseBatches(List<Segment> segments, int batchRows, Scratch scratch) {
    int nStreams = spec.streams.size();
    Gather gather = new Gather(outputVectors(segments), segments.size(), batchRows, scratch);
    // Each written for a batch's rows [0, m) before it is read.
    boolean[][] shows = new boolean[nStreams][];
    scratch.baseShows = Scratch.slots(scratch.baseShows, nStreams - 1);
    for (int s = 0; s < nStreams; s++) {
      shows[s] = scratch.baseShows[s] = Scratch.booleans(scratch.baseShows[s], batchRows);
    }
    int[] segs = scratch.baseSegs = Scratch.ints(scratch.baseSegs, batchRows);
    int[] rowsOf = scratch.baseRows = Scratch.ints(scratch.baseRows, batchRows);
    return new Iterator<ColumnarBatch>() {
      int g = 0;
      int r = 0;
      int m = -1;
      ColumnVector[] dels = dels(0);

      ColumnVector[] dels(int segment) {
        ColumnVector[] out = new ColumnVector[nStreams];
        for (int s = 0; s < nStreams; s++) out[s] = segments.get(segment).column(spec.streams.get(s).meta("del"));
        return out;
      }

      @Override public boolean hasNext() {
        if (m < 0) {
          m = 0;
          while (g < segments.size() && m < batchRows) {
            if (r >= segments.get(g).rows) {
              if (++g < segments.size()) dels = dels(g);
              r = 0;
              continue;
            }
            boolean alive = false;
            for (int s = 0; s < nStreams; s++) {
              ColumnVector d = dels[s];
              shows[s][m] = d != null && !d.isNullAt(r) && !d.getBoolean(r);
              alive |= shows[s][m];
            }
            if (alive) {
              segs[m] = g;
              rowsOf[m] = r;
              m++;
            }
            r++;
          }
        }
        return m > 0;
      }

      @Override public ColumnarBatch next() {
        if (!hasNext()) throw new NoSuchElementException();
        for (int o = 0; o < outTypes.length; o++) {
          int[] src = gather.columns[o].src;
          int[] rows = gather.columns[o].rows;
          boolean[] streamShows = outStream[o] >= 0 ? shows[outStream[o]] : null;
          int[] offset = gather.offsets[o];
          for (int i = 0; i < m; i++) {
            boolean hidden = streamShows != null && !streamShows[i];
            src[i] = hidden ? gather.defaults : segs[i];
            rows[i] = hidden ? 0 : rowsOf[i] + offset[segs[i]];
          }
        }
        int rows = m;
        m = -1;
        return gather.ready(rows);
      }
    };
  }

}
