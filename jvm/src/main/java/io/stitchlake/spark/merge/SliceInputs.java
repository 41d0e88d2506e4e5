package io.stitchlake.spark.merge;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.io.FileBatches;
import io.stitchlake.spark.plan.MergeSpec;
import io.stitchlake.spark.plan.PlanFile;
import io.stitchlake.spark.plan.PlanSlice;
import io.stitchlake.spark.plan.StreamSpec;
import java.io.Closeable;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiFunction;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The files of a slice with logs, read for {@link SliceMerger}: window by window where they are in key order, else
 * each file whole (a row group per batch, since the merged rows point into them), checked against its commit and
 * typed as the table types it. One reader for Spark's tasks and for the conformance harness ({@link MergeMain}), so
 * the suite checks the reads a task makes.
 */
public final class SliceInputs implements Closeable {
  private final MergeSpec spec;
  private final StructType tableSchema;
  private final DataFileReader files;
  private final FilterPredicate rowGroups;
  private final Set<String> rowGroupColumns;
  private final List<FileBatches> open = new ArrayList<>();

  /**
   * @param rowGroups a row-group predicate of the read (null: none), applied where a file has its columns
   */
  public SliceInputs(MergeSpec spec, StructType tableSchema, DataFileReader files, FilterPredicate rowGroups,
      Set<String> rowGroupColumns) {
    this.spec = spec;
    this.tableSchema = tableSchema;
    this.files = files;
    this.rowGroups = rowGroups;
    this.rowGroupColumns = rowGroupColumns;
  }

  /** Slices merged window by window ({@link KeyWindows}) in this JVM: tests read it to see which path ran. */
  public static final AtomicLong WINDOWED_SLICES = new AtomicLong();

  public static long windowedSlices() {
    return WINDOWED_SLICES.get();
  }

  /** A file of the slice, open, none of its batches read yet. */
  record Opened(PlanFile file, FileData data, FileBatches batches) {}

  /**
   * The slice's merged batches ({@link SliceMerger#mergeBatches}): window by window ({@link KeyWindows}) when every
   * file is in key order and the key's types compare here, else from the files read whole. Valid until
   * {@link #release()}; each batch until the next.
   */
  public Iterator<ColumnarBatch> mergeBatches(PlanSlice slice, SliceMerger merger, int batchRows) throws IOException {
    return merged(slice, merger, (files, scratch) -> merger.mergeBatches(files, batchRows, scratch));
  }

  /**
   * The slice's merged rows ({@link SliceMerger#merge}; an output with a struct, array or map column), window by
   * window or from the files read whole as {@link #mergeBatches}. Each row is valid until the next: its nested
   * values are views onto the files' vectors, which a window's files reuse.
   */
  public Iterator<InternalRow> mergeRows(PlanSlice slice, SliceMerger merger) throws IOException {
    return merged(slice, merger, merger::merge);
  }

  /** {@code merge}: a window's files (or the slice's whole) merged over the arrays given (see {@link Scratch}). */
  private <T> Iterator<T> merged(PlanSlice slice, SliceMerger merger,
      BiFunction<List<FileData>, Scratch, Iterator<T>> merge) throws IOException {
    List<Opened> opened = open(slice, merger);
    boolean windows = !opened.isEmpty() && KeyWindows.KeyOrder.supports(merger.commonTypes);
    for (Opened o : opened) windows &= o.batches.keyOrdered();
    if (windows) {
      WINDOWED_SLICES.incrementAndGet();
      return new KeyWindows<>(merger, opened, merge);
    }
    List<FileData> data = new ArrayList<>();
    for (Opened o : opened) {
      o.batches.holdRowGroups();
      data.add(whole(o));
    }
    return merge.apply(data, new Scratch());
  }

  /** The slice's files, open, their batches reusing their vectors (a window's) until told to hold row groups. */
  private List<Opened> open(PlanSlice slice, SliceMerger merger) throws IOException {
    List<Opened> out = new ArrayList<>();
    if (slice.base != null) out.add(open(slice.base, FileData.Kind.BASE, merger.baseColumns()));
    for (PlanFile log : slice.logs) {
      // A stream no longer in the config (dropped): its logs show nothing (docs/spark-reader.md, rule 11).
      if (spec.stream(log.stream) == null) continue;
      out.add(open(log, FileData.Kind.LOG, merger.logColumns(log.stream)));
    }
    return out;
  }

  private Opened open(PlanFile file, FileData.Kind kind, List<String> names) throws IOException {
    List<StructField> fields = new ArrayList<>();
    for (String name : names) fields.add(DataTypes.createStructField(name, typeOf(name), true));
    StructType columns = new StructType(fields.toArray(new StructField[0]));
    FileBatches batches = files.open(file, columns, rowGroups, rowGroupColumns);
    open.add(batches);
    FileData data = new FileData(kind, kind == FileData.Kind.BASE ? null : file.stream, file.commit, List.of(),
        columns, file.absent.keySet());
    return new Opened(file, data, batches);
  }

  private static FileData whole(Opened o) throws IOException {
    List<ColumnarBatch> all = new ArrayList<>();
    while (o.batches.next()) all.add(o.batches.get());
    return o.data.with(all);
  }

  /** A table column's type, or a meta column's: {@code del} boolean, ranked ordering values their type, else long. */
  private DataType typeOf(String name) {
    if (tableSchema.getFieldIndex(name).isDefined()) return tableSchema.apply(name).dataType();
    for (StreamSpec stream : spec.streams) {
      String prefix = stream.meta("");
      if (!name.startsWith(prefix)) continue;
      String field = name.substring(prefix.length());
      if (field.equals("del")) return DataTypes.BooleanType;
      String last = field.substring(field.lastIndexOf("__") < 0 ? 0 : field.lastIndexOf("__") + 2);
      if (last.length() > 1 && last.charAt(0) == 'o' && last.substring(1).chars().allMatch(Character::isDigit)) {
        StreamSpec.Ordering ordering = stream.ordering.get(Integer.parseInt(last.substring(1)));
        return ordering.ranked ? Types.parse(ordering.type) : DataTypes.LongType;
      }
      return DataTypes.LongType;
    }
    throw new IllegalArgumentException("the plan has no column " + name);
  }

  /** Frees the batches of the slices read so far (the merged rows pointing into them must be consumed). */
  public void release() throws IOException {
    for (FileBatches f : open) f.close();
    open.clear();
  }

  @Override
  public void close() throws IOException {
    release();
  }
}
