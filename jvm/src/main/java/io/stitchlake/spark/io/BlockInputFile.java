package io.stitchlake.spark.io;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import org.apache.parquet.io.InputFile;
import org.apache.parquet.io.SeekableInputStream;

/**
 * Parquet's input over a file held as blocks of bytes: one block when the file was read whole (and verified), or the
 * segments a read touches of a file this JVM verified before ({@link VerifiedFile}), each checked as it is loaded.
 */
final class BlockInputFile implements InputFile {
  /** The block holding a position of the file. */
  interface Blocks {
    Block at(long position) throws IOException;
  }

  /** Bytes of the file from {@code start} on. */
  record Block(long start, byte[] bytes) {}

  private final long length;
  private final Blocks blocks;

  BlockInputFile(long length, Blocks blocks) {
    this.length = length;
    this.blocks = blocks;
  }

  /** A file already in memory, whole. */
  static BlockInputFile of(byte[] data) {
    Block whole = new Block(0, data);
    return new BlockInputFile(data.length, position -> whole);
  }

  @Override
  public long getLength() {
    return length;
  }

  @Override
  public SeekableInputStream newStream() {
    return new Stream(length, blocks);
  }

  static final class Stream extends SeekableInputStream {
    private final long length;
    private final Blocks blocks;
    private long pos;

    Stream(long length, Blocks blocks) {
      this.length = length;
      this.blocks = blocks;
    }

    @Override
    public long getPos() {
      return pos;
    }

    @Override
    public void seek(long newPos) throws IOException {
      if (newPos < 0 || newPos > length) throw new EOFException("seek to " + newPos + " of " + length);
      pos = newPos;
    }

    @Override
    public int read() throws IOException {
      if (pos >= length) return -1;
      Block block = blocks.at(pos);
      return block.bytes()[(int) (pos++ - block.start())] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (len == 0) return 0;
      if (pos >= length) return -1;
      Block block = blocks.at(pos);
      int at = (int) (pos - block.start());
      int n = Math.min(len, block.bytes().length - at);
      System.arraycopy(block.bytes(), at, b, off, n);
      pos += n;
      return n;
    }

    @Override
    public void readFully(byte[] bytes) throws IOException {
      readFully(bytes, 0, bytes.length);
    }

    @Override
    public void readFully(byte[] bytes, int start, int len) throws IOException {
      if (length - pos < len) throw new EOFException("reached the end of the file");
      for (int done = 0; done < len; ) done += read(bytes, start + done, len - done);
    }

    @Override
    public int read(ByteBuffer buf) throws IOException {
      if (!buf.hasRemaining()) return 0;
      if (pos >= length) return -1;
      Block block = blocks.at(pos);
      int at = (int) (pos - block.start());
      int n = Math.min(buf.remaining(), block.bytes().length - at);
      buf.put(block.bytes(), at, n);
      pos += n;
      return n;
    }

    @Override
    public void readFully(ByteBuffer buf) throws IOException {
      if (length - pos < buf.remaining()) throw new EOFException("reached the end of the file");
      while (buf.hasRemaining()) read(buf);
    }
  }
}
