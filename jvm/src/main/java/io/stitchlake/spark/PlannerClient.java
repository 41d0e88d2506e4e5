package io.stitchlake.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.stitchlake.spark.plan.Plan;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.spark.sql.SparkSession;

/**
 * The driver's planner: one {@code <python> -m stitchlake.spark.planner} child for the life of the JVM, asked with
 * JSON lines (docs/spark-reader.md, "The planner process"). Requests are serialised: the protocol answers in order.
 * An answer that does not come within {@code spark.stitchlake.planner.timeout} seconds stops the planner and fails
 * the read: a planner stuck on an unreachable store must not hang the driver.
 */
public final class PlannerClient {
  static final String PYTHON_CONF = "spark.stitchlake.python";
  static final String TIMEOUT_CONF = "spark.stitchlake.planner.timeout";
  /** Long enough to plan a large table on a slow object store; short enough that a stuck driver is noticed. */
  static final long DEFAULT_TIMEOUT_SECONDS = 600;

  private static PlannerClient instance;

  private final String python;
  private final Process process;
  private final BufferedWriter in;
  private final BufferedReader out;
  // Reads the answer, so that the caller can stop waiting for it.
  private final ExecutorService answers = Executors.newSingleThreadExecutor(task -> {
    Thread thread = new Thread(task, "stitchlake-planner-answers");
    thread.setDaemon(true);
    return thread;
  });
  private long nextId = 1;

  private PlannerClient(String python) throws IOException {
    this.python = python;
    ProcessBuilder builder = new ProcessBuilder(python, "-m", "stitchlake.spark.planner");
    // Its standard error is its log: the driver's own stderr shows it.
    builder.redirectError(ProcessBuilder.Redirect.INHERIT);
    process = builder.start();
    in = new BufferedWriter(new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8));
    out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
    // Closing its stdin ends it; the hook also covers a JVM that exits without closing it.
    Runtime.getRuntime().addShutdownHook(new Thread(this::close, "stitchlake-planner-stop"));
  }

  /** The driver's planner, started on first use (again if the last one died or stopped answering, or when
   * {@code spark.stitchlake.python} names another Python). */
  public static synchronized PlannerClient get() {
    String python = python();
    if (instance == null || !instance.process.isAlive() || !instance.python.equals(python)) {
      if (instance != null) instance.close();
      try {
        instance = new PlannerClient(python);
      } catch (IOException e) {
        throw new StitchException(
            "UsageError",
            2,
            "cannot start the stitchlake planner with '" + python + " -m stitchlake.spark.planner' ("
                + e.getMessage() + "): set spark.stitchlake.python to a Python that has stitchlake installed");
      }
    }
    return instance;
  }

  /**
   * Start the planner now, so that the session's first read finds it up instead of waiting for its Python to start
   * (stitchlake.spark.session.register calls this). A planner that cannot start is reported by that first read.
   */
  public static void prestart() {
    try {
      get();
    } catch (RuntimeException e) {
      // the first read raises it again, where the user sees it
    }
  }

  /** {@code spark.stitchlake.python}, else the PySpark settings, else the environment's, else python3. */
  static String python() {
    List<String> candidates = new ArrayList<>();
    SparkSession session = session();
    if (session != null) {
      for (String key : new String[] {PYTHON_CONF, "spark.pyspark.driver.python", "spark.pyspark.python"}) {
        candidates.add(session.conf().get(key, null));
      }
    }
    candidates.add(System.getenv("PYSPARK_DRIVER_PYTHON"));
    candidates.add(System.getenv("PYSPARK_PYTHON"));
    for (String candidate : candidates) {
      if (candidate != null && !candidate.isBlank()) return candidate;
    }
    return "python3";
  }

  /** {@code spark.stitchlake.planner.timeout}: seconds to wait for one answer (0 or less: no limit). */
  static long timeoutSeconds() {
    SparkSession session = session();
    String value = session == null ? null : session.conf().get(TIMEOUT_CONF, null);
    if (value == null || value.isBlank()) return DEFAULT_TIMEOUT_SECONDS;
    try {
      return Long.parseLong(value.trim());
    } catch (NumberFormatException e) {
      throw new StitchException(
          "UsageError", 2, TIMEOUT_CONF + " must be a whole number of seconds, not '" + value + "'");
    }
  }

  private static SparkSession session() {
    // A py4j thread may have no active session: the default one has the same conf.
    return SparkSession.getActiveSession().getOrElse(() -> SparkSession.getDefaultSession().getOrElse(() -> null));
  }

  /** The {@code result} of one request, or the planner's error raised as is. */
  public synchronized JsonNode call(ObjectNode request) {
    long id = nextId++;
    request.put("id", id);
    long timeout = timeoutSeconds();
    String line;
    try {
      in.write(Plan.JSON.writeValueAsString(request));
      in.write('\n');
      in.flush();
      Future<String> answer = answers.submit(out::readLine);
      line = timeout > 0 ? answer.get(timeout, TimeUnit.SECONDS) : answer.get();
    } catch (IOException | ExecutionException e) {
      line = null;
    } catch (TimeoutException e) {
      // Its answers can no longer be matched to requests: stop it; the next read starts a new one.
      process.destroyForcibly();
      throw new StitchException("PlannerError", 1, "the stitchlake planner (" + python
          + " -m stitchlake.spark.planner) did not answer within " + timeout + " s (" + TIMEOUT_CONF
          + "); it was stopped and the next read starts a new one: see its log above");
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
      throw new StitchException("PlannerError", 1, "interrupted while waiting for the stitchlake planner");
    }
    if (line == null) {
      throw new StitchException(
          "PlannerError", 1, "the stitchlake planner (" + python + " -m stitchlake.spark.planner) ended unexpectedly: "
              + "see its log above");
    }
    JsonNode response;
    try {
      response = Plan.JSON.readTree(line);
    } catch (IOException e) {
      throw new StitchException("PlannerError", 1, "the stitchlake planner answered with something other than "
          + "JSON: " + line);
    }
    if (response.path("id").asLong() != id) {
      throw new StitchException("PlannerError", 1, "the stitchlake planner answered request "
          + response.path("id") + " where " + id + " was asked");
    }
    if (!response.path("ok").asBoolean(false)) {
      JsonNode error = response.path("error");
      throw new StitchException(
          error.path("type").asText("Error"), error.path("exit_code").asInt(1), error.path("message").asText(line));
    }
    return response.path("result");
  }

  /** The {@code schema} op: the table's Spark schema for these options, and its location. */
  public JsonNode schema(Map<String, String> options) {
    ObjectNode request = Plan.JSON.createObjectNode();
    request.put("op", "schema");
    request.set("options", Plan.JSON.valueToTree(options));
    return call(request);
  }

  /** The {@code plan} op: the plan document (read from and deleted with its plan file when it was large). */
  public Plan plan(Map<String, String> options, List<String> columns, JsonNode filters, Map<String, String> conf) {
    ObjectNode request = Plan.JSON.createObjectNode();
    request.put("op", "plan");
    request.set("options", Plan.JSON.valueToTree(options));
    if (columns != null) request.set("columns", Plan.JSON.valueToTree(columns));
    request.set("filters", filters);
    request.set("conf", Plan.JSON.valueToTree(conf));
    JsonNode result = call(request);
    if (result.has("plan_file")) {
      Path file = new File(result.get("plan_file").asText()).toPath();
      try {
        return Plan.parse(Files.readString(file, StandardCharsets.UTF_8));
      } catch (IOException e) {
        throw new StitchException("PlannerError", 1, "cannot read the plan file " + file + ": " + e.getMessage());
      } finally {
        try {
          Files.deleteIfExists(file);
        } catch (IOException ignored) {
          // a temp file left behind is harmless
        }
      }
    }
    return Plan.parse(result.toString());
  }

  private void close() {
    try {
      in.close();
    } catch (IOException ignored) {
      // already gone
    }
    try {
      if (!process.waitFor(5, TimeUnit.SECONDS)) process.destroy();
    } catch (InterruptedException e) {
      process.destroy();
      Thread.currentThread().interrupt();
    }
    answers.shutdownNow();
  }
}
