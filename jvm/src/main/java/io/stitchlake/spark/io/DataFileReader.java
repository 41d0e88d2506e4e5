package io.stitchlake.spark.io;

import io.stitchlake.spark.plan.PlanFile;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.FileSplit;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.parquet.ParquetReadOptions;
import org.apache.parquet.column.statistics.BooleanStatistics;
import org.apache.parquet.filter2.compat.FilterCompat;
import org.apache.parquet.filter2.compat.RowGroupFilter;
import org.apache.parquet.filter2.predicate.FilterPredicate;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.hadoop.util.HadoopInputFile;
import org.apache.parquet.io.SeekableInputStream;
import org.apache.parquet.schema.MessageType;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.parquet.ParquetReadSupport;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.execution.datasources.parquet.VectorizedParquetRecordReader;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import scala.Option;

/**
 * Reads a data file of a plan: the first time this JVM reads it, its bytes through Hadoop's FileSystem (local, s3a),
 * checked against the XXH3 and row count its commit recorded, then decoded from memory, so the check costs no
 * second read; later, only the parts of a Parquet file the read needs, each checked against the digest this JVM
 * took of it then ({@link VerifiedFile}). Parquet goes through Spark's own {@link VectorizedParquetRecordReader}
 * (only the requested columns, row groups a predicate rules out skipped); Avro logs through {@link AvroLogReader}.
 * Columns the file predates show their literal.
 */
public final class DataFileReader {
  /** Row groups decoded in this JVM (tests read it to see key filters skip row groups). */
  public static final AtomicLong ROW_GROUPS_READ = new AtomicLong();

  public static final AtomicLong ROW_GROUPS_SKIPPED = new AtomicLong();

  private final Configuration conf;
  private final int batchSize;
  /**
   * The reader takes the columns to decode from its conf: one copy per requested column set, kept for the task
   * (copying a Configuration per file, and above all letting Parquet make a {@code new Configuration()} that parses
   * Hadoop's default XML resources, cost more than decoding the small files of a slice).
   */
  private final Map<String, Configuration> perColumns = new HashMap<>();
  private final Map<Configuration, TaskAttemptContextImpl> contexts = new java.util.IdentityHashMap<>();
  private ParquetReadOptions readOptions;

  /** Data files read whole and checked against their digest in this JVM (tests read it: a warm read checks none). */
  public static final AtomicLong FILES_VERIFIED = new AtomicLong();

  public static long filesVerified() {
    return FILES_VERIFIED.get();
  }

  public static long rowGroupsRead() {
    return ROW_GROUPS_READ.get();
  }

  public static long rowGroupsSkipped() {
    return ROW_GROUPS_SKIPPED.get();
  }

  /** Base files of log-free slices read without their delete flags ({@link #allFalse}) in this JVM (tests). */
  public static final AtomicLong BASES_READ_WITHOUT_FLAGS = new AtomicLong();

  public static long basesReadWithoutFlags() {
    return BASES_READ_WITHOUT_FLAGS.get();
  }

  /** Parquet readers made to decode off the heap (tests read it to see the session's setting reach the tasks). */
  public static final AtomicLong OFF_HEAP_READERS = new AtomicLong();

  public static long offHeapReaders() {
    return OFF_HEAP_READERS.get();
  }

  /** The footer entry of a file in key order, one row per key (stitchlake/merge/stitch.py, {@code KEY_ORDERED}). */
  static final String KEY_ORDERED_KEY = "stitchlake.rows";

  static final String KEY_ORDERED_VALUE = "key-ordered";

  /** Spark's setting for vectors off the heap (SQLConf's {@code COLUMN_VECTOR_OFFHEAP_ENABLED}). */
  static final String OFF_HEAP = "spark.sql.columnVector.offheap.enabled";

  private final boolean offHeap;
  private String timeline;
  private String plannedAt;

  public DataFileReader(Configuration conf, int batchSize) {
    this.conf = conf;
    this.batchSize = batchSize;
    this.offHeap = conf.getBoolean(OFF_HEAP, false);
  }

  /**
   * What Spark's ParquetScan sets for its vectorized reader, from the session's SQL conf (read by key: SQLConf's
   * entries are Scala vals), and page checksums verified as the Python reader does.
   */
  public static void configure(Configuration hadoop, SQLConf conf) {
    hadoop.set("parquet.read.support.class", ParquetReadSupport.class.getName());
    hadoop.set("spark.sql.session.timeZone", conf.sessionLocalTimeZone());
    hadoop.setBoolean("spark.sql.optimizer.nestedSchemaPruning.enabled", conf.nestedSchemaPruningEnabled());
    hadoop.setBoolean("spark.sql.caseSensitive", conf.caseSensitiveAnalysis());
    hadoop.setBoolean("spark.sql.parquet.binaryAsString", conf.isParquetBinaryAsString());
    hadoop.setBoolean("spark.sql.parquet.int96AsTimestamp", conf.isParquetINT96AsTimestamp());
    hadoop.setBoolean("spark.sql.parquet.inferTimestampNTZ.enabled", conf.parquetInferTimestampNTZEnabled());
    hadoop.setBoolean("spark.sql.legacy.parquet.nanosAsLong", conf.legacyParquetNanosAsLong());
    hadoop.setBoolean("parquet.page.verify-checksum.enabled", true);
    // As Spark's own Parquet scan: decoded vectors off the heap when the session asks (freed as each slice is done).
    hadoop.setBoolean(OFF_HEAP, conf.offHeapColumnVectorEnabled());
    VerifiedFile.check(conf.getConfString(VerifiedFile.SETTING, VerifiedFile.FIRST_READ));
  }

  /**
   * Whether every row of a Parquet file this JVM already verified has each of {@code columns} false, never null, as
   * its footer's row-group statistics say (base files carry them for the streams' delete flags; a file without them,
   * or not verified yet, answers false and is read the long way).
   */
  public boolean allFalse(PlanFile file, List<String> columns) {
    VerifiedFile verified = VerifiedFile.known(file, conf);
    if (verified == null) return false;
    for (BlockMetaData block : verified.footer.getBlocks()) {
      int found = 0;
      for (ColumnChunkMetaData chunk : block.getColumns()) {
        if (!columns.contains(chunk.getPath().toDotString())) continue;
        if (!(chunk.getStatistics() instanceof BooleanStatistics stats)) return false;
        if (!stats.isNumNullsSet() || stats.getNumNulls() != 0) return false;
        if (block.getRowCount() > 0 && (!stats.hasNonNullValue() || stats.getMax())) return false;
        found++;
      }
      if (found != columns.size()) return false;
    }
    return true;
  }

  /** The whole file, verified against its commit's digest (none recorded: files from before checksums). */
  public byte[] fetch(PlanFile file) throws IOException {
    Path path = new Path(file.path);
    FileSystem fs = path.getFileSystem(conf);
    byte[] data;
    try (FSDataInputStream in = fs.open(path)) {
      data = readAll(in, file.bytes);
    } catch (java.io.FileNotFoundException e) {
      throw missing(file);
    }
    if (file.checksum != null && !file.checksum.isEmpty()) {
      FILES_VERIFIED.incrementAndGet();
      String found = Xxh3.digest(data, 0, data.length);
      if (!found.equals(file.checksum)) {
        throw new CorruptFileException(file.path, file.path + ": checksum mismatch (its commit recorded "
            + file.checksum + ", the file has " + found + "): changed or damaged after it was written");
      }
    }
    return data;
  }

  private static byte[] readAll(InputStream in, long expected) throws IOException {
    if (expected > 0 && expected < Integer.MAX_VALUE - 16) {
      // One read of the recorded size, then a probe: a longer file is read whole so its digest reports it.
      byte[] buf = new byte[(int) expected];
      int n = in.readNBytes(buf, 0, buf.length);
      int extra = in.read();
      if (n == buf.length && extra < 0) return buf;
      java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
      out.write(buf, 0, n);
      if (extra >= 0) {
        out.write(extra);
        in.transferTo(out);
      }
      return out.toByteArray();
    }
    return in.readAllBytes();
  }

  /**
   * The file's {@code columns} (table names and types), in batches that reuse their vectors, as a scan streams them,
   * until {@link FileBatches#holdRowGroups} makes every batch a whole row group in vectors of its own (the merge of a
   * slice read whole holds a file's batches together).
   */
  public FileBatches open(PlanFile file, StructType columns, FilterPredicate rowGroups, Set<String> filterColumns)
      throws IOException {
    return open(file, columns, rowGroups, filterColumns, null, Set.of());
  }

  /**
   * As {@link #open(PlanFile, StructType, FilterPredicate, Set)}, with {@code fallback} skipping row groups where
   * {@code rowGroups} cannot decide in this file (one of its columns absent from the file or of another type in it):
   * a predicate over value columns too, with the key and partition one as its fallback.
   */
  public FileBatches open(PlanFile file, StructType columns, FilterPredicate rowGroups, Set<String> filterColumns,
      FilterPredicate fallback, Set<String> fallbackColumns) throws IOException {
    if ("avro".equals(file.format) || file.path.endsWith(".avro")) {
      ColumnarBatch batch = AvroLogReader.read(file, fetch(file), withoutAbsent(file, columns));
      checkRows(file, batch.numRows());
      return single(withAbsent(file, columns, batch));
    }
    VerifiedFile verified = VerifiedFile.known(file, conf);
    byte[] data = verified == null ? fetch(file) : null;
    return new ParquetBatches(file, data, verified, columns, rowGroups, filterColumns, fallback, fallbackColumns);
  }

  /**
   * Where the table's timeline is and the completion time of the latest instant the planner saw (the plan's
   * {@code timeline} and {@code planned_at}): what tells a file a clean or restore removed after planning from damage.
   */
  public DataFileReader planned(String timeline, String plannedAt) {
    this.timeline = timeline;
    this.plannedAt = plannedAt;
    return this;
  }

  /**
   * A file the plan names that storage no longer has: never an empty read. With a clean, restore or rollback
   * completed since planning (or pending: still deleting), the table moved on under the query; with none, damage;
   * with the timeline unreadable, either.
   */
  private CorruptFileException missing(PlanFile file) {
    List<String> since = changedSincePlanning();
    if (since == null) {
      return CorruptFileException.missing(file.path, file.path + ": data file is missing");
    }
    if (since.isEmpty()) {
      return new CorruptFileException(file.path, file.path + ": data file is missing (named by a completed instant)");
    }
    String named = String.join(", ", since.subList(0, Math.min(since.size(), 3)))
        + (since.size() > 3 ? " and " + (since.size() - 3) + " more" : "");
    return CorruptFileException.missing(file.path, file.path + ": data file is gone: the table changed after this "
        + "query was planned (" + named + "); a clean removes the files of replaced slices, a restore or rollback "
        + "those of the commits it undoes: run the query again");
  }

  /**
   * The actions that delete data files a completed instant named, as the timeline names their files: completed
   * ({@code <requested>_<completed>.<action>}) and every state ({@code <requested>.<action>.<state>}), which stays
   * beside the completed file until the instant is archived.
   */
  private static final Pattern COMPLETED = Pattern.compile("^(\\d{17})_(\\d{17})\\.(clean|restore|rollback)$");
  private static final Pattern STATE = Pattern.compile("^(\\d{17})\\.(clean|restore|rollback)\\.(requested|inflight)$");

  /**
   * The cleans, restores and rollbacks completed after the plan ("clean 2026... completed 2026...") or not completed
   * yet ("... pending"), latest first; null when the timeline cannot be listed.
   */
  private List<String> changedSincePlanning() {
    if (timeline == null) return null;
    Map<String, String> completed = new HashMap<>(); // requested time -> completion time
    Map<String, String> action = new HashMap<>();
    try {
      Path dir = new Path(timeline);
      for (FileStatus status : dir.getFileSystem(conf).listStatus(dir)) {
        String name = status.getPath().getName();
        Matcher done = COMPLETED.matcher(name);
        Matcher state = STATE.matcher(name);
        if (done.matches()) {
          completed.put(done.group(1), done.group(2));
          action.put(done.group(1), done.group(3));
        } else if (state.matches()) {
          action.putIfAbsent(state.group(1), state.group(2));
        }
      }
    } catch (IOException e) {
      return null;
    }
    List<String[]> found = new ArrayList<>(); // {sort key, text}
    for (Map.Entry<String, String> e : action.entrySet()) {
      String at = completed.get(e.getKey());
      if (at == null) {
        found.add(new String[] {"99999999999999999" + e.getKey(), e.getValue() + " " + e.getKey() + " pending"});
      } else if (plannedAt == null || at.compareTo(plannedAt) > 0) {
        found.add(new String[] {at + e.getKey(), e.getValue() + " " + e.getKey() + " completed " + at});
      }
    }
    found.sort((a, b) -> b[0].compareTo(a[0]));
    List<String> texts = new ArrayList<>();
    for (String[] f : found) texts.add(f[1]);
    return texts;
  }

  static void checkRows(PlanFile file, long rows) {
    if (rows != file.rows) {
      throw new CorruptFileException(
          file.path, file.path + ": holds " + rows + " rows but its commit recorded " + file.rows);
    }
  }

  /** The requested columns the file has (those it predates show their literal instead). */
  static StructType withoutAbsent(PlanFile file, StructType columns) {
    List<StructField> kept = new ArrayList<>();
    for (StructField f : columns.fields()) if (!file.absent.containsKey(f.name())) kept.add(f);
    return new StructType(kept.toArray(new StructField[0]));
  }

  /** {@code batch} (the file's own columns) with the absent ones added as constants, in {@code columns}' order. */
  static ColumnarBatch withAbsent(PlanFile file, StructType columns, ColumnarBatch batch) {
    if (file.absent.isEmpty()) return batch;
    int rows = batch.numRows();
    ColumnVector[] out = new ColumnVector[columns.length()];
    int own = 0;
    for (int i = 0; i < out.length; i++) {
      StructField f = columns.fields()[i];
      String literal = file.absent.get(f.name());
      out[i] = literal != null ? Literals.constant(rows, f.dataType(), literal) : batch.column(own++);
    }
    return new ColumnarBatch(out, rows);
  }

  private static FileBatches single(ColumnarBatch batch) {
    return new FileBatches() {
      boolean done;

      @Override
      public boolean next() {
        boolean more = !done;
        done = true;
        return more;
      }

      @Override
      public ColumnarBatch get() {
        return batch;
      }

      @Override
      public void close() {
        batch.close();
      }
    };
  }

  private Configuration confFor(StructType own) {
    String json = own.json();
    return perColumns.computeIfAbsent(json, k -> {
      // A JobConf: the task attempt context made of it per reader keeps it instead of copying it again.
      Configuration local = new org.apache.hadoop.mapred.JobConf(conf);
      local.set(ParquetReadSupport.SPARK_ROW_REQUESTED_SCHEMA(), k);
      local.set("org.apache.spark.sql.parquet.row.attributes", k);
      return local;
    });
  }

  /** The footer's read options from the task's conf (ParquetReadOptions.builder() would build a new one). */
  private ParquetReadOptions readOptions() {
    if (readOptions == null) readOptions = org.apache.parquet.HadoopReadOptions.builder(conf).build();
    return readOptions;
  }

  /** The footer of a file read whole into {@code data}. */
  private ParquetMetadata footerOf(PlanFile file, byte[] data) {
    try (ParquetFileReader reader = ParquetFileReader.open(BlockInputFile.of(data), readOptions())) {
      return reader.getFooter();
    } catch (RuntimeException | IOException e) {
      throw new CorruptFileException(file.path, file.path + ": cannot read data file (" + e + ")");
    }
  }

  /**
   * Parquet decoded by Spark's vectorized reader, given the footer read here: from memory when the file was just
   * read whole and verified ({@code data}), else from storage, only the segments the requested columns and row
   * groups touch, each checked as it is loaded ({@link VerifiedFile}).
   */
  private final class ParquetBatches implements FileBatches {
    private final PlanFile file;
    private final byte[] data;
    private final VerifiedFile verified;
    private final long length;
    private FSDataInputStream source;
    private final StructType columns;
    private final StructType own;
    private final ParquetMetadata footer;
    private final List<BlockMetaData> blocks;
    private boolean perRowGroup;
    private final Configuration local;
    private final List<VectorizedParquetRecordReader> open = new ArrayList<>();
    private int nextBlock;
    private ColumnarBatch current;

    ParquetBatches(
        PlanFile file,
        byte[] data,
        VerifiedFile verified,
        StructType columns,
        FilterPredicate rowGroups,
        Set<String> filterColumns,
        FilterPredicate fallback,
        Set<String> fallbackColumns)
        throws IOException {
      this.file = file;
      this.data = data;
      this.verified = verified;
      this.length = data != null ? data.length : verified.length;
      this.columns = columns;
      this.own = withoutAbsent(file, columns);
      local = confFor(own);
      footer = verified != null ? verified.footer : footerOf(file, data);
      long rows = 0;
      for (BlockMetaData block : footer.getBlocks()) rows += block.getRowCount();
      checkRows(file, rows);
      if (verified == null) VerifiedFile.remember(file, conf, data, footer);
      List<BlockMetaData> all = footer.getBlocks();
      MessageType schema = footer.getFileMetaData().getSchema();
      // Only the predicate's own columns decide, by statistics; Spark re-checks every row after the scan.
      List<BlockMetaData> kept = kept(rowGroups, filterColumns, all, schema);
      if (kept == null) kept = kept(fallback, fallbackColumns, all, schema);
      blocks = kept == null ? all : kept;
      ROW_GROUPS_SKIPPED.addAndGet(all.size() - blocks.size());
    }

    /**
     * The row groups {@code rowGroups} does not rule out, or null where it cannot decide in this file: none given,
     * one of its columns absent from the file (added since: the read shows its default), or of another type in it
     * (widened since: Parquet refuses to compare across types).
     */
    private List<BlockMetaData> kept(FilterPredicate rowGroups, Set<String> filterColumns, List<BlockMetaData> all,
        MessageType schema) {
      if (rowGroups == null || !hasColumns(schema, filterColumns)) return null;
      try {
        return RowGroupFilter.filterRowGroups(FilterCompat.get(rowGroups), all, schema);
      } catch (IllegalArgumentException e) {
        return null;
      }
    }

    /** The file on storage, opened once for the segments its readers load. */
    private FSDataInputStream source() throws IOException {
      if (source == null) {
        Path path = new Path(file.path);
        try {
          source = path.getFileSystem(conf).open(path);
        } catch (java.io.FileNotFoundException e) {
          throw missing(file);
        }
      }
      return source;
    }

    private boolean hasColumns(MessageType schema, Set<String> columns) {
      for (String column : columns) {
        if (!schema.containsField(column)) return false;
      }
      return true;
    }

    private VectorizedParquetRecordReader reader(List<BlockMetaData> groups, int capacity) throws IOException {
      // The in-memory stream and this footer (only the kept row groups) make ParquetFileReader read no file.
      ParquetMetadata kept = new ParquetMetadata(footer.getFileMetaData(), groups);
      Path path = new Path(file.path);
      HadoopInputFile input = HadoopInputFile.fromStatus(new FileStatus(length, false, 1, 0, 0, path), local);
      BlockInputFile bytes = data != null ? BlockInputFile.of(data) : verified.input(file, source());
      SeekableInputStream stream = bytes.newStream();
      VectorizedParquetRecordReader reader = new VectorizedParquetRecordReader(
          null, "CORRECTED", "UTC", "CORRECTED", "UTC", offHeap, capacity);
      if (offHeap) OFF_HEAP_READERS.incrementAndGet();
      try {
        reader.initialize(
            new FileSplit(path, 0, length, new String[0]),
            contexts.computeIfAbsent(local, c -> new TaskAttemptContextImpl(c, new TaskAttemptID())),
            Option.apply(input),
            Option.apply(stream),
            Option.apply(kept));
        reader.initBatch(new StructType(), InternalRow.empty());
        reader.enableReturningBatches();
      } catch (InterruptedException e) {
        reader.close();
        Thread.currentThread().interrupt();
        throw new java.io.InterruptedIOException("interrupted reading " + file.path);
      } catch (RuntimeException | IOException e) {
        reader.close();
        stream.close();
        throw new CorruptFileException(file.path, file.path + ": cannot read data file (" + e + ")");
      }
      open.add(reader);
      return reader;
    }

    @Override
    public boolean keyOrdered() {
      return KEY_ORDERED_VALUE.equals(footer.getFileMetaData().getKeyValueMetaData().get(KEY_ORDERED_KEY));
    }

    @Override
    public void holdRowGroups() {
      if (!open.isEmpty() || nextBlock > 0) throw new IllegalStateException("holdRowGroups after the first batch");
      perRowGroup = true;
    }

    @Override
    public boolean next() throws IOException {
      if (perRowGroup) {
        while (nextBlock < blocks.size()) {
          BlockMetaData block = blocks.get(nextBlock++);
          if (block.getRowCount() == 0) continue;
          VectorizedParquetRecordReader reader = reader(List.of(block), (int) block.getRowCount());
          ROW_GROUPS_READ.incrementAndGet();
          if (!nextBatch(reader)) continue;
          current = withAbsent(file, columns, reader.resultBatch());
          return true;
        }
        return false;
      }
      if (open.isEmpty()) {
        if (blocks.isEmpty()) return false;
        reader(blocks, batchSize);
        ROW_GROUPS_READ.addAndGet(blocks.size());
      }
      if (!nextBatch(open.get(0))) return false;
      current = withAbsent(file, columns, open.get(0).resultBatch());
      return true;
    }

    private boolean nextBatch(VectorizedParquetRecordReader reader) throws IOException {
      try {
        return reader.nextBatch();
      } catch (RuntimeException | IOException e) {
        throw new CorruptFileException(file.path, file.path + ": cannot read data file (" + e + ")");
      }
    }

    @Override
    public ColumnarBatch get() {
      return current;
    }

    @Override
    public void close() throws IOException {
      for (VectorizedParquetRecordReader reader : open) {
        reader.close();
      }
      open.clear();
      if (source != null) source.close();
      source = null;
    }
  }
}
