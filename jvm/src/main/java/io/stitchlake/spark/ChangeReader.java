package io.stitchlake.spark;

import io.stitchlake.spark.io.DataFileReader;
import io.stitchlake.spark.merge.ChangeFeed;
import io.stitchlake.spark.plan.ChangeSlice;
import io.stitchlake.spark.plan.MergeSpec;
import java.io.IOException;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/** A task of an incremental read: the change rows of its file groups, one group at a time ({@link ChangeFeed}). */
final class ChangeReader implements PartitionReader<InternalRow> {
  private final StitchReaderFactory factory;
  private final List<ChangeSlice> groups;
  private ChangeFeed feed;
  private int next;
  private Iterator<InternalRow> rows = Collections.emptyIterator();
  private InternalRow row;

  ChangeReader(StitchReaderFactory factory, List<ChangeSlice> groups) {
    this.factory = factory;
    this.groups = groups;
  }

  @Override
  public boolean next() throws IOException {
    while (!rows.hasNext()) {
      if (next >= groups.size()) return false;
      if (feed == null) {
        DataFileReader files = factory.files();
        feed = new ChangeFeed(MergeSpec.parse(factory.mergeJson), factory.tableSchema, files, factory.changes.keys,
            factory.changes.beforeImages);
      }
      rows = feed.read(groups.get(next++), factory.output).iterator();
    }
    row = rows.next();
    return true;
  }

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public void close() {}
}
