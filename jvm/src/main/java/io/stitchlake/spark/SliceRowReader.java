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
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

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
  private SliceInputs inputs;
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
    if (inputs != null) inputs.release();
  }

  private Iterator<InternalRow> merge(PlanSlice slice) throws IOException {
    if (inputs == null) {
      spec = MergeSpec.parse(factory.mergeJson);
      inputs = new SliceInputs(spec, factory.tableSchema, files, factory.rowGroups, factory.rowGroupColumns);
    }
    SliceMerger merger = new SliceMerger(spec, factory.output);
    return merger.merge(inputs.read(slice, merger));
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
