package io.stitchlake.spark;

/** An error the planner reported (its message is what {@code stitch read} would print), or a reader error. */
public class StitchException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String type;
  private final int exitCode;

  public StitchException(String type, int exitCode, String message) {
    super(message);
    this.type = type;
    this.exitCode = exitCode;
  }

  /** The Python error class ({@code UsageError}, {@code CorruptFileError}, ...). */
  public String type() {
    return type;
  }

  public int exitCode() {
    return exitCode;
  }

  /**
   * As Python names the error ({@code stitchlake.errors.UsageError: ...}): Spark and Py4J carry a failure as this
   * text, and the driver's {@code spark/errors.py} reads the class, so its exit code, back from it.
   */
  @Override
  public String toString() {
    return "stitchlake.errors." + type + ": " + getMessage();
  }
}
