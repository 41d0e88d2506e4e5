package io.stitchlake.spark;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.io.FileBatches;
import io.stitchlake.spark.io.Literals;
import io.stitchlake.spark.io.ViewVector;
import io.stitchlake.spark.plan.MergeView;
import io.stitchlake.spark.plan.PlanSlice;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The rows of log-free slices (rule 7 of docs/spark-reader.md), batch by batch from the base files: a row is kept
 * where some stream's {@code del} is false, and a stream's columns show its default where its {@code del} is not
 * false. Nothing is copied: kept rows are a row-id mapping, defaults a view over a one-value vector.
 */
final class LogFreeReader implements PartitionReader<ColumnarBatch> {
  private final StitchReaderFactory factory;
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
  /** The current file's batches hold every stream's {@code del} after the output columns. */
  private boolean flagsRead;
  private ColumnarBatch batch;

  LogFreeReader(StitchReaderFactory factory, List<PlanSlice> slices) {
    this(factory, slices, factory.files());
  }

  /** {@code files}: the task's reader (its per-column-set Hadoop confs are kept for the task). */
  LogFreeReader(StitchReaderFactory factory, List<PlanSlice> slices, DataFileReader files) {
    this.factory = factory;
    this.slices = slices;
    this.files = files;
    MergeView merge = factory.merge;
    streams = merge.streams.size();
    List<StructField> fields = new ArrayList<>(List.of(factory.output.fields()));
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
    int n = factory.output.length();
    streamOf = new int[n];
    defaults = new ColumnVector[n];
    for (int i = 0; i < n; i++) {
      StructField f = factory.output.fields()[i];
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
        // A row's flags decide what it shows; where every flag of the file is false, nothing is there to decide.
        // A file this JVM has not verified yet is read whole first, flags included; its footer, verified by then,
        // still spares its rows the pass.
        boolean known = files.allFalse(slice.base, dels);
        current = files.open(slice.base, known ? factory.output : read, factory.rowGroups, factory.rowGroupColumns);
        everyRowShowsEveryStream = known || files.allFalse(slice.base, dels);
        flagsRead = !known;
        if (everyRowShowsEveryStream) DataFileReader.BASES_READ_WITHOUT_FLAGS.incrementAndGet();
      }
    }
  }

  @Override
  public boolean next() throws IOException {
    while (nextFileBatch()) {
      batch = !everyRowShowsEveryStream ? view(current.get()) : flagsRead ? outputOnly(current.get()) : current.get();
      if (batch.numRows() > 0) return true;
    }
    return false;
  }

  /** {@code in}'s output columns, without the flags read after them. */
  private ColumnarBatch outputOnly(ColumnarBatch in) {
    ColumnVector[] columns = new ColumnVector[factory.output.length()];
    for (int i = 0; i < columns.length; i++) columns[i] = in.column(i);
    return new ColumnarBatch(columns, in.numRows());
  }

  private ColumnarBatch view(ColumnarBatch in) {
    int rows = in.numRows();
    int outputs = factory.output.length();
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
      ColumnVector column = in.column(i);
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
      columns[i] = mapping == null && hidden == null ? column : new ViewVector(column, mapping, hidden, defaults[i]);
    }
    return new ColumnarBatch(columns, kept);
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
