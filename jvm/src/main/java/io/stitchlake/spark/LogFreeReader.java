package io.stitchlake.spark;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.io.FileBatches;
import io.stitchlake.spark.io.GatherVector;
import io.stitchlake.spark.io.Literals;
import io.stitchlake.spark.plan.MergeView;
import io.stitchlake.spark.plan.PlanSlice;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The rows of log-free slices (rule 7 of docs/spark-reader.md), batch by batch from the base files: a row is kept
 * where some stream's {@code del} is false, and a stream's columns show its default where its {@code del} is not
 * false. Nothing is copied: every output column is a {@link GatherVector} over the file's vector (and the default's
 * one-value vector), as a merged slice's are, so that Spark's generated code meets one vector class in a read of
 * both kinds of slice, and one session's reads before and after a compaction (docs/spark-reader.md, "Compiled
 * early").
 */
public final class LogFreeReader implements PartitionReader<ColumnarBatch> {
  /** The columns Spark asked for, in its order. */
  private final StructType output;
  private final FilterPredicate rowGroups;
  private final Set<String> rowGroupColumns;
  /** Over value columns too: for a base file whose rows show every stream, whose values are the output's. */
  private final FilterPredicate shownRowGroups;
  private final Set<String> shownRowGroupColumns;
  private final List<PlanSlice> slices;
  private final DataFileReader files;
  /** What is read of a base file: the output columns, then every stream's {@code del}. */
  private final StructType read;
  /** Per output column: the stream it belongs to (index into the merge's streams), or -1 for a common column. */
  private final int[] streamOf;
  private final ColumnVector[] defaults;
  private final int streams;
  /** Every stream's {@code del} column, in stream order. */
  private final List<String> dels = new ArrayList<>();
  private int nextSlice;
  private FileBatches current;
  /** The current file's rows show every stream (its statistics say so): its batches are the output as they are. */
  private boolean everyRowShowsEveryStream;
  private ColumnarBatch batch;
  /** Rows [0, n) in order and source 0 for every row: the mapping of a column shown whole, shared by batches. */
  private int[] identity = new int[0];
  private int[] zeros = new int[0];

  LogFreeReader(StitchReaderFactory factory, List<PlanSlice> slices) {
    this(factory, slices, factory.files());
  }

  /** {@code files}: the task's reader (its per-column-set Hadoop confs are kept for the task). */
  LogFreeReader(StitchReaderFactory factory, List<PlanSlice> slices, DataFileReader files) {
    this(factory.merge, factory.output, factory.rowGroups, factory.rowGroupColumns, factory.shownRowGroups,
        factory.shownRowGroupColumns, slices, files);
  }

  /**
   * The reader of {@code slices} (all log-free) as a task builds it; public for the merge harness
   * ({@code MergeMain}), which holds it to the Python merge as it holds the merge of slices with logs.
   */
  public LogFreeReader(MergeView merge, StructType output, FilterPredicate rowGroups, Set<String> rowGroupColumns,
      FilterPredicate shownRowGroups, Set<String> shownRowGroupColumns, List<PlanSlice> slices,
      DataFileReader files) {
    this.output = output;
    this.rowGroups = rowGroups;
    this.rowGroupColumns = rowGroupColumns;
    this.shownRowGroups = shownRowGroups;
    this.shownRowGroupColumns = shownRowGroupColumns;
    this.slices = slices;
    this.files = files;
    streams = merge.streams.size();
    List<StructField> fields = new ArrayList<>(List.of(output.fields()));
    for (MergeView.Stream s : merge.streams) {
      fields.add(DataTypes.createStructField(s.delColumn(), DataTypes.BooleanType, true));
      dels.add(s.delColumn());
    }
    read = new StructType(fields.toArray(new StructField[0]));
    Map<String, Integer> owner = new HashMap<>();
    Map<String, String> defaultOf = new HashMap<>();
    for (int s = 0; s < streams; s++) {
      for (MergeView.Column c : merge.streams.get(s).columns) {
        owner.put(c.name, s);
        defaultOf.put(c.name, c.defaultJson);
      }
    }
    int n = output.length();
    streamOf = new int[n];
    defaults = new ColumnVector[n];
    for (int i = 0; i < n; i++) {
      StructField f = output.fields()[i];
      streamOf[i] = owner.getOrDefault(f.name(), -1);
      if (streamOf[i] >= 0) defaults[i] = Literals.constant(1, f.dataType(), defaultOf.get(f.name()));
    }
  }

  /** The base files' batches, one slice after another (a slice without a base file shows nothing). */
  private boolean nextFileBatch() throws IOException {
    while (true) {
      if (current != null && current.next()) return true;
      if (current != null) {
        current.close();
        current = null;
      }
      if (nextSlice >= slices.size()) return false;
      PlanSlice slice = slices.get(nextSlice++);
      if (slice.base != null) {
        // A row's flags decide what it shows; where every flag of the file is false, nothing is there to decide,
        // and the file's values are the read's: their statistics may skip row groups too (RowGroupFilters). A
        // file this JVM has not verified yet is read whole first, flags included; its footer, verified by then,
        // still spares its rows the pass.
        boolean known = files.allFalse(slice.base, dels);
        current = known
            ? files.open(slice.base, output, shownRowGroups, shownRowGroupColumns, rowGroups, rowGroupColumns)
            : files.open(slice.base, read, rowGroups, rowGroupColumns);
        everyRowShowsEveryStream = known || files.allFalse(slice.base, dels);
        if (everyRowShowsEveryStream) DataFileReader.BASES_READ_WITHOUT_FLAGS.incrementAndGet();
      }
    }
  }

  @Override
  public boolean next() throws IOException {
    while (nextFileBatch()) {
      ColumnarBatch in = current.get();
      batch = everyRowShowsEveryStream ? whole(in) : view(in);
      if (batch.numRows() > 0) return true;
    }
    return false;
  }

  /** {@code in}'s output columns as they are (the flags, read after them or not, left out). */
  private ColumnarBatch whole(ColumnarBatch in) {
    int rows = in.numRows();
    ColumnVector[] columns = new ColumnVector[output.length()];
    for (int i = 0; i < columns.length; i++) columns[i] = gathered(i, in.column(i), null, null, rows);
    return new ColumnarBatch(columns, rows);
  }

  private ColumnarBatch view(ColumnarBatch in) {
    int rows = in.numRows();
    int outputs = output.length();
    boolean[][] live = new boolean[streams][rows];
    int[] map = new int[rows];
    int kept = 0;
    for (int r = 0; r < rows; r++) {
      boolean any = false;
      for (int s = 0; s < streams; s++) {
        ColumnVector del = in.column(outputs + s);
        boolean shows = !del.isNullAt(r) && !del.getBoolean(r);
        live[s][r] = shows;
        any |= shows;
      }
      if (any) map[kept++] = r;
    }
    int[] mapping = kept == rows ? null : map;
    ColumnVector[] columns = new ColumnVector[outputs];
    for (int i = 0; i < outputs; i++) {
      boolean[] hidden = null;
      if (streamOf[i] >= 0) {
        boolean[] shows = live[streamOf[i]];
        for (int r = 0; r < kept; r++) {
          if (!shows[mapping == null ? r : mapping[r]]) {
            if (hidden == null) hidden = new boolean[kept];
            hidden[r] = true;
          }
        }
      }
      columns[i] = gathered(i, in.column(i), mapping, hidden, kept);
    }
    return new ColumnarBatch(columns, kept);
  }

  /**
   * Output column {@code i} over {@code kept} rows: row r is row {@code mapping[r]} of {@code column} (row r where
   * {@code mapping} is null), or the column's default where {@code hidden[r]}.
   */
  private GatherVector gathered(int i, ColumnVector column, int[] mapping, boolean[] hidden, int kept) {
    if (hidden == null) {
      if (identity.length < kept) {
        identity = new int[kept];
        for (int r = 0; r < kept; r++) identity[r] = r;
        zeros = new int[kept];
      }
      return new GatherVector(new ColumnVector[] {column}, zeros, mapping == null ? identity : mapping);
    }
    int[] src = new int[kept];
    int[] rows = new int[kept];
    for (int r = 0; r < kept; r++) {
      if (hidden[r]) src[r] = 1; // the default's one row: rows[r] stays 0
      else rows[r] = mapping == null ? r : mapping[r];
    }
    return new GatherVector(new ColumnVector[] {column, defaults[i]}, src, rows);
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() throws IOException {
    if (current != null) current.close();
    for (ColumnVector d : defaults) if (d != null) d.close();
  }
}
