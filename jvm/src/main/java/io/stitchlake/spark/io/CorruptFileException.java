package io.stitchlake.spark.io;

import io.stitchlake.spark.StitchException;

/** A data file that is not what its commit recorded (Python's CorruptFileError); the message names the file. */
public final class CorruptFileException extends StitchException {
  private static final long serialVersionUID = 1L;
  public static final String WHAT_TO_DO =
      "a damaged table file: put it back from a backup or a copy of the table, then run again";

  private final String file;

  public CorruptFileException(String file, String message) {
    super("CorruptFileError", 1, message + " (" + WHAT_TO_DO + ")");
    this.file = file;
  }

  public String file() {
    return file;
  }
}
