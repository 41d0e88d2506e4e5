package io.stitchlake.spark;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.io.FileBatches;
import io.stitchlake.spark.merge.FileData;
import io.stitchlake.spark.merge.SliceMerger;
import io.stitchlake.spark.merge.Types;
import io.stitchlake.spark.plan.MergeSpec;
import io.stitchlake.spark.plan.PlanFile;
import io.stitchlake.spark.plan.PlanSlice;
import io.stitchlake.spark.plan.StreamSpec;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Rows of a task's slices, for reads where some slice has logs: a log-free slice's rows come from its columnar
 * view, a slice with logs is merged by {@link SliceMerger} over its files read whole (each row group in vectors
 * of its own, since the merged rows point into them).
 */
final class SliceRowReader implements PartitionReader<InternalRow> {
  private final StitchReaderFactory factory;
  private final List<PlanSlice> slices;
  private final DataFileReader files;
  private MergeSpec spec;
  private int nextSlice;
  private Iterator<InternalRow> rows = Collections.emptyIterator();
  private LogFreeReader logFree;
  private final List<FileBatches> open = new ArrayList<>();
  private InternalRow row;

  SliceRowReader(StitchReaderFactory factory, List<PlanSlice> slices) {
    this.factory = factory;
    this.slices = slices;
    this.files = new DataFileReader(factory.conf.value().value(), factory.batchSize);
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (rows.hasNext()) {
        row = rows.next();
        return true;
      }
      if (logFree != null && logFree.next()) {
        rows = logFree.get().rowIterator();
        continue;
      }
      release();
      if (nextSlice >= slices.size()) return false;
      PlanSlice slice = slices.get(nextSlice++);
      if (slice.logFree()) {
        logFree = new LogFreeReader(factory, List.of(slice), files);
      } else {
        rows = merge(slice);
      }
    }
  }

  private void release() throws IOException {
    if (logFree != null) {
      logFree.close();
      logFree = null;
    }
    for (FileBatches f : open) f.close();
    open.clear();
  }

  private Iterator<InternalRow> merge(PlanSlice slice) throws IOException {
    if (spec == null) spec = MergeSpec.parse(factory.mergeJson);
    SliceMerger merger = new SliceMerger(spec, factory.output);
    List<FileData> data = new ArrayList<>();
    if (slice.base != null) data.add(read(slice.base, FileData.Kind.BASE, merger.baseColumns()));
    for (PlanFile log : slice.logs) {
      // A stream no longer in the config (dropped): its logs show nothing (docs/spark-reader.md, rule 11).
      if (spec.stream(log.stream) == null) continue;
      data.add(read(log, FileData.Kind.LOG, merger.logColumns(log.stream)));
    }
    return merger.merge(data);
  }

  private FileData read(PlanFile file, FileData.Kind kind, List<String> names) throws IOException {
    List<StructField> fields = new ArrayList<>();
    for (String name : names) fields.add(DataTypes.createStructField(name, typeOf(name), true));
    StructType columns = new StructType(fields.toArray(new StructField[0]));
    FileBatches batches = files.open(file, columns, factory.rowGroups, factory.rowGroupColumns, true);
    open.add(batches);
    List<ColumnarBatch> all = new ArrayList<>();
    while (batches.next()) all.add(batches.get());
    return new FileData(kind, kind == FileData.Kind.BASE ? null : file.stream, file.commit, all, columns,
        file.absent.keySet());
  }

  /** A table column's type, or a meta column's: {@code del} boolean, ranked ordering values their type, else long. */
  private DataType typeOf(String name) {
    if (factory.tableSchema.getFieldIndex(name).isDefined()) return factory.tableSchema.apply(name).dataType();
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

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public void close() throws IOException {
    release();
  }
}
