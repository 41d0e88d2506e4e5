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
import java.util.List;
import java.util.Set;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The files of a slice with logs, read for {@link SliceMerger}: each file whole (a row group per batch, since the
 * merged rows point into them), checked against its commit and typed as the table types it. One reader for Spark's
 * tasks and for the conformance harness ({@link MergeMain}), so the suite checks the reads a task makes.
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

  /** The slice's base and logs as the merger wants them; valid until {@link #release()}. */
  public List<FileData> read(PlanSlice slice, SliceMerger merger) throws IOException {
    List<FileData> data = new ArrayList<>();
    if (slice.base != null) data.add(read(slice.base, FileData.Kind.BASE, merger.baseColumns()));
    for (PlanFile log : slice.logs) {
      // A stream no longer in the config (dropped): its logs show nothing (docs/spark-reader.md, rule 11).
      if (spec.stream(log.stream) == null) continue;
      data.add(read(log, FileData.Kind.LOG, merger.logColumns(log.stream)));
    }
    return data;
  }

  private FileData read(PlanFile file, FileData.Kind kind, List<String> names) throws IOException {
    List<StructField> fields = new ArrayList<>();
    for (String name : names) fields.add(DataTypes.createStructField(name, typeOf(name), true));
    StructType columns = new StructType(fields.toArray(new StructField[0]));
    FileBatches batches = files.open(file, columns, rowGroups, rowGroupColumns, true);
    open.add(batches);
    List<ColumnarBatch> all = new ArrayList<>();
    while (batches.next()) all.add(batches.get());
    return new FileData(kind, kind == FileData.Kind.BASE ? null : file.stream, file.commit, all, columns,
        file.absent.keySet());
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
