package io.stitchlake.spark.io;

import net.openhft.hashing.LongHashFunction;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;

/** XXH3-64 with seed 0, the digest commits record for data files ({@code xxh3:<16 hex>}, stitchlake/checksums.py). */
public final class Xxh3 {
  // Spark's jars carry only XXH32/XXH64 (lz4-java): zero-allocation-hashing is shaded in for XXH3.
  private static final LongHashFunction XX3 = LongHashFunction.xx3();

  private Xxh3() {}

  public static long hash(byte[] data, int offset, int length) {
    return XX3.hashBytes(data, offset, length);
  }

  /** {@code xxh3:<16 lower-case hex digits>}, as Python's {@code checksums.digest}. */
  public static String digest(byte[] data, int offset, int length) {
    return "xxh3:" + String.format("%016x", hash(data, offset, length));
  }

  /** Prints each file's digest on a line of its own (the test vectors check this against Python's xxhash). */
  public static void main(String[] args) throws IOException {
    StringBuilder out = new StringBuilder();
    for (String path : args) {
      byte[] data = Files.readAllBytes(Paths.get(path));
      out.append(digest(data, 0, data.length)).append('\n');
    }
    System.out.print(out);
  }
}
