package io.stitchlake.spark;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.merge.SliceInputs;
import io.stitchlake.spark.merge.SliceMerger;
import io.stitchlake.spark.plan.MergeSpec;
import io.stitchlake.spark.plan.PlanSlice;
import java.io.IOException;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.function.Function;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A task's slices, for reads where some slice has logs: a log-free slice's batches come from
 * {@link LogFreeReader}, a slice with logs is merged by {@link SliceMerger}, window by window where its files are in
 * key order, else over its files read whole: in batches ({@link SliceInputs#mergeBatches}) when every output column
 * is flat (Spark then reads only the columns a query uses), else in rows ({@link SliceInputs#mergeRows}).
 */
final class SliceReader<T> implements PartitionReader<T> {
  private final StitchReaderFactory factory;
  private final List<PlanSlice> slices;
  private final DataFileReader files;
  private final Function<ColumnarBatch, Iterator<T>> logFreeItems;
  private final Merged<T> mergedItems;

  /** A slice with logs, merged into the reader's items. */
  private interface Merged<T> {
    Iterator<T> of(SliceInputs inputs, PlanSlice slice, SliceMerger merger) throws IOException;
  }
  private MergeSpec spec;
  private int nextSlice;
  private Iterator<T> items = Collections.emptyIterator();
  private LogFreeReader logFree;
  private SliceInputs inputs;
  private T item;

  private SliceReader(StitchReaderFactory factory, List<PlanSlice> slices,
      Function<ColumnarBatch, Iterator<T>> logFreeItems, Merged<T> mergedItems) {
    this.factory = factory;
    this.slices = slices;
    this.files = factory.files();
    this.logFreeItems = logFreeItems;
    this.mergedItems = mergedItems;
  }

  static SliceReader<ColumnarBatch> batches(StitchReaderFactory factory, List<PlanSlice> slices) {
    return new SliceReader<>(factory, slices, batch -> List.of(batch).iterator(),
        (inputs, slice, merger) -> inputs.mergeBatches(slice, merger, factory.batchSize));
  }

  static SliceReader<InternalRow> rows(StitchReaderFactory factory, List<PlanSlice> slices) {
    return new SliceReader<>(factory, slices, ColumnarBatch::rowIterator,
        (inputs, slice, merger) -> inputs.mergeRows(slice, merger));
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (items.hasNext()) {
        item = items.next();
        return true;
      }
      if (logFree != null && logFree.next()) {
        items = logFreeItems.apply(logFree.get());
        continue;
      }
      release();
      if (nextSlice >= slices.size()) return false;
      PlanSlice slice = slices.get(nextSlice++);
      if (slice.logFree()) {
        logFree = new LogFreeReader(factory, List.of(slice), files);
      } else {
        items = merge(slice);
      }
    }
  }

  private void release() throws IOException {
    if (logFree != null) {
      logFree.close();
      logFree = null;
    }
    if (inputs != null) inputs.release();
  }

  private Iterator<T> merge(PlanSlice slice) throws IOException {
    if (inputs == null) {
      spec = MergeSpec.parse(factory.mergeJson);
      inputs = new SliceInputs(spec, factory.tableSchema, files, factory.rowGroups, factory.rowGroupColumns);
    }
    SliceMerger merger = new SliceMerger(spec, factory.output);
    return mergedItems.of(inputs, slice, merger);
  }

  @Override
  public T get() {
    return item;
  }

  @Override
  public void close() throws IOException {
    release();
  }
}
