package io.stitchlake.spark.io;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import org.apache.parquet.io.InputFile;
import org.apache.parquet.io.SeekableInputStream;

/** A file already in memory (read once, its checksum verified), as Parquet's input. */
final class InMemoryInputFile implements InputFile {
  private final byte[] data;

  InMemoryInputFile(byte[] data) {
    this.data = data;
  }

  @Override
  public long getLength() {
    return data.length;
  }

  @Override
  public SeekableInputStream newStream() {
    return new Stream(data);
  }

  static final class Stream extends SeekableInputStream {
    private final byte[] data;
    private int pos;

    Stream(byte[] data) {
      this.data = data;
    }

    @Override
    public long getPos() {
      return pos;
    }

    @Override
    public void seek(long newPos) throws IOException {
      if (newPos < 0 || newPos > data.length) throw new EOFException("seek to " + newPos + " of " + data.length);
      pos = (int) newPos;
    }

    @Override
    public int read() {
      return pos < data.length ? data[pos++] & 0xff : -1;
    }

    @Override
    public int read(byte[] b, int off, int len) {
      if (len == 0) return 0;
      if (pos >= data.length) return -1;
      int n = Math.min(len, data.length - pos);
      System.arraycopy(data, pos, b, off, n);
      pos += n;
      return n;
    }

    @Override
    public void readFully(byte[] bytes) throws IOException {
      readFully(bytes, 0, bytes.length);
    }

    @Override
    public void readFully(byte[] bytes, int start, int len) throws IOException {
      if (data.length - pos < len) throw new EOFException("reached the end of the file");
      System.arraycopy(data, pos, bytes, start, len);
      pos += len;
    }

    @Override
    public int read(ByteBuffer buf) {
      int n = Math.min(buf.remaining(), data.length - pos);
      if (n <= 0) return buf.remaining() == 0 ? 0 : -1;
      buf.put(data, pos, n);
      pos += n;
      return n;
    }

    @Override
    public void readFully(ByteBuffer buf) throws IOException {
      if (data.length - pos < buf.remaining()) throw new EOFException("reached the end of the file");
      read(buf);
    }
  }
}
