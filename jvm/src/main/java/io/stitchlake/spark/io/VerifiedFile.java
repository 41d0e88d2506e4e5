package io.stitchlake.spark.io;

import io.stitchlake.spark.StitchException;
import io.stitchlake.spark.plan.PlanFile;
import java.io.IOException;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeSet;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;

/**
 * A Parquet data file this JVM has read whole and verified (XXH3 and row count against its commit): its footer, and
 * the XXH3 of each segment of its bytes (each column chunk, and each stretch between and around them) taken from
 * the verified bytes. A later read of the file loads only the segments it touches, each checked against its digest,
 * so every byte a read trusts is still checked, and a query of 3 columns of a compacted base file reads and hashes
 * those 3 columns' chunks instead of all 36.
 *
 * <p>{@code spark.stitchlake.verify = every} (the session's SQL conf, which reaches the task's Hadoop conf) reads
 * and verifies every file whole on every read instead.
 */
final class VerifiedFile {
  static final String SETTING = "spark.stitchlake.verify";
  static final String FIRST_READ = "first";
  static final String EVERY_READ = "every";
  /** At most this many files are remembered (the least recently used go first): a footer and a few digests each. */
  static final int CAPACITY = 4096;

  private static final Map<String, VerifiedFile> KNOWN =
      Collections.synchronizedMap(new LinkedHashMap<>(64, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, VerifiedFile> eldest) {
          return size() > CAPACITY;
        }
      });

  final ParquetMetadata footer;
  final long length;
  /** Segment i is the bytes [starts[i], starts[i + 1]) (the last one ends at the file's end). */
  private final long[] starts;

  private final long[] digests;

  private VerifiedFile(ParquetMetadata footer, long length, long[] starts, long[] digests) {
    this.footer = footer;
    this.length = length;
    this.starts = starts;
    this.digests = digests;
  }

  /** The setting's value in the session's conf, refused (exit 2) unless it is one of its two. */
  static void check(String value) {
    if (!FIRST_READ.equals(value) && !EVERY_READ.equals(value)) {
      throw new StitchException("UsageError", 2, SETTING + " must be '" + FIRST_READ + "' (a data file is checked "
          + "whole the first time a JVM reads it, then the parts each read takes; the default) or '" + EVERY_READ
          + "' (checked whole on every read), got '" + value + "'");
    }
  }

  /** Only files whose commit recorded a digest are verified; a file of the same path with other bytes misses. */
  private static String key(PlanFile file) {
    return file.path + '\u0000' + file.checksum + '\u0000' + file.bytes;
  }

  private static boolean remembers(PlanFile file, Configuration conf) {
    return file.checksum != null && !file.checksum.isEmpty() && !EVERY_READ.equals(conf.get(SETTING, FIRST_READ));
  }

  /** What this JVM verified of {@code file}, or null: then it is read whole and verified. */
  static VerifiedFile known(PlanFile file, Configuration conf) {
    return remembers(file, conf) ? KNOWN.get(key(file)) : null;
  }

  /** Remembers {@code file}, just read whole into {@code data} and verified, with its footer. */
  static void remember(PlanFile file, Configuration conf, byte[] data, ParquetMetadata footer) {
    if (!remembers(file, conf)) return;
    TreeSet<Long> cuts = new TreeSet<>();
    cuts.add(0L);
    for (BlockMetaData block : footer.getBlocks()) {
      for (ColumnChunkMetaData chunk : block.getColumns()) {
        long start = chunk.getStartingPos();
        long end = start + chunk.getTotalSize();
        if (start < 0 || end > data.length || start >= end) continue;
        cuts.add(start);
        if (end < data.length) cuts.add(end);
      }
    }
    long[] starts = cuts.stream().mapToLong(Long::longValue).toArray();
    long[] digests = new long[starts.length];
    for (int i = 0; i < starts.length; i++) {
      long end = i + 1 < starts.length ? starts[i + 1] : data.length;
      digests[i] = Xxh3.hash(data, (int) starts[i], (int) (end - starts[i]));
    }
    KNOWN.put(key(file), new VerifiedFile(footer, data.length, starts, digests));
  }

  /**
   * The file's bytes as Parquet's input, from {@code in}: each segment is read when a read first touches it and
   * checked against its digest before any of it is handed over.
   */
  BlockInputFile input(PlanFile file, FSDataInputStream in) {
    Map<Integer, BlockInputFile.Block> loaded = new HashMap<>();
    return new BlockInputFile(length, position -> {
      int i = Arrays.binarySearch(starts, position);
      int segment = i >= 0 ? i : -i - 2;
      BlockInputFile.Block block = loaded.get(segment);
      if (block == null) {
        block = load(file, in, segment);
        loaded.put(segment, block);
      }
      return block;
    });
  }

  private BlockInputFile.Block load(PlanFile file, FSDataInputStream in, int segment) throws IOException {
    long start = starts[segment];
    long end = segment + 1 < starts.length ? starts[segment + 1] : length;
    byte[] bytes = new byte[(int) (end - start)];
    try {
      in.readFully(start, bytes);
    } catch (java.io.EOFException e) {
      throw new CorruptFileException(file.path, file.path + ": shorter than when this JVM verified it (" + length
          + " bytes): changed or damaged after it was written");
    }
    if (Xxh3.hash(bytes, 0, bytes.length) != digests[segment]) {
      throw new CorruptFileException(file.path, file.path + ": checksum mismatch in bytes " + start + "-" + end
          + " (against the digest this JVM took of them when it verified the whole file): changed or damaged "
          + "after it was written");
    }
    return new BlockInputFile.Block(start, bytes);
  }
}
