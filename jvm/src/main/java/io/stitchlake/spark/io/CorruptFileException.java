package io.stitchlake.spark.io;

import io.stitchlake.spark.StitchException;

/** A data file that is not what its commit recorded (Python's CorruptFileError); the message names the file. */
public class CorruptFileException extends StitchException {
  private static final long serialVersionUID = 1L;
  public static final String WHAT_TO_DO =
      "a damaged table file: put it back from a backup or a copy of the table, then run again";
  /** Python's {@code DataFileMissing.what_to_do}: a file gone is a clean or restore under the read, or damage. */
  public static final String MISSING_WHAT_TO_DO =
      "if `stitch clean` or a restore ran meanwhile, run again; otherwise put the file back from a backup or a "
          + "copy of the table";

  private final String file;

  public CorruptFileException(String file, String message) {
    this("CorruptFileError", file, message, WHAT_TO_DO);
  }

  private CorruptFileException(String type, String file, String message, String whatToDo) {
    super(type, 1, message + " (" + whatToDo + ")");
    this.file = file;
  }

  /** A file the plan names that storage lacks (Python's DataFileMissing, exit 1 as there). */
  public static CorruptFileException missing(String file, String message) {
    return new CorruptFileException("DataFileMissing", file, message, MISSING_WHAT_TO_DO);
  }

  public String file() {
    return file;
  }
}
