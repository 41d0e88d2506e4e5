package io.stitchlake.spark.merge;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One file of a slice as read: its columns as Spark column vectors (one or more batches) under the table's types.
 * The batches must stay valid until the merge's rows have all been consumed: the rows point into them.
 */
public final class FileData {
  public enum Kind { BASE, LOG }

  final Kind kind;
  final String stream;
  final long commit;
  final List<ColumnarBatch> batches;
  final StructType schema;
  final Set<String> predates;
  /** Column name to its index in the batches. */
  final Map<String, Integer> index;

  /**
   * @param stream the log's stream (null for a base file)
   * @param commit the log's commit completion time as a number (the version component of its rows)
   * @param schema the batches' columns, by name
   * @param predates the file's {@code absent} column names (filled with their literal by the reader)
   */
  public FileData(Kind kind, String stream, long commit, List<ColumnarBatch> batches, StructType schema,
      Set<String> predates) {
    this.kind = kind;
    this.stream = stream;
    this.commit = commit;
    this.batches = batches;
    this.schema = schema;
    this.predates = predates == null ? Set.of() : predates;
    index = new HashMap<>();
    String[] names = schema.fieldNames();
    for (int i = 0; i < names.length; i++) index.put(names[i], i);
  }

  private FileData(FileData file, List<ColumnarBatch> batches) {
    kind = file.kind;
    stream = file.stream;
    commit = file.commit;
    this.batches = batches;
    schema = file.schema;
    predates = file.predates;
    index = file.index;
  }

  /** The same file with other batches of its rows (a window of them: {@link KeyWindows}). */
  FileData with(List<ColumnarBatch> rows) {
    return new FileData(this, rows);
  }

  /** The index of column {@code name} in the batches, or -1 when the file does not carry it. */
  int column(String name) {
    Integer i = index.get(name);
    return i == null ? -1 : i;
  }

  int rows() {
    int n = 0;
    for (ColumnarBatch b : batches) n += b.numRows();
    return n;
  }
}
