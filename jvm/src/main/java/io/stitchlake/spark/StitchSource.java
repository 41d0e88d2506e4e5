package io.stitchlake.spark;

import com.fasterxml.jackson.databind.JsonNode;
import io.stitchlake.spark.plan.Plan;
import java.util.Collections;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.DataSource$;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Option;

/**
 * {@code format("stitchlake")} when the jar is on the classpath (docs/spark-reader.md): reads through the JVM
 * reader; writes and S3 tables without {@code s3a} go to the Python data source
 * {@code stitchlake_python}.
 */
public final class StitchSource implements TableProvider, DataSourceRegister {
  public static final String PYTHON_SOURCE = "stitchlake_python";
  /** A pre-made plan document (JSON text or a file's path): read as planned, with no planner. */
  public static final String PLAN_OPTION = "plan";

  private static final Set<String> NOTICED = ConcurrentHashMap.newKeySet();
  /** Table locations the planner reported, by the options that named them (delegation is decided on them). */
  private static final Map<String, String> LOCATIONS = new ConcurrentHashMap<>();
  /** Reads the planner hands to the Python data source, by the options that named them. */
  private static final Map<String, String> DELEGATES = new ConcurrentHashMap<>();

  @Override
  public String shortName() {
    return "stitchlake";
  }

  // As the Python source: a write's table takes the data frame's schema, a catalog table the one it stored.
  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    Map<String, String> opts = lower(options.asCaseSensitiveMap());
    String reason = delegation(opts);
    if (reason != null) return python(reason).inferSchema(options);
    if (opts.containsKey(PLAN_OPTION)) return Plan.load(opts.get(PLAN_OPTION)).schema();
    JsonNode result = PlannerClient.get().schema(opts);
    LOCATIONS.put(where(opts), result.path("table").asText(""));
    String planned = result.path("delegate").isTextual() ? result.path("delegate").asText() : null;
    if (planned != null && !planned.isEmpty()) DELEGATES.put(where(opts), planned);
    reason = delegation(opts);
    if (reason != null) return python(reason).inferSchema(options);
    return (StructType) DataType.fromJson(result.path("schema").toString());
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    Map<String, String> opts = lower(properties);
    String reason = delegation(opts);
    if (reason != null) {
      TableProvider python = python(reason);
      return python.getTable(schema, partitioning, properties);
    }
    return new StitchTable(schema, partitioning, properties);
  }

  static Map<String, String> lower(Map<String, String> options) {
    Map<String, String> out = new HashMap<>();
    options.forEach((k, v) -> out.put(k.toLowerCase(Locale.ROOT), v));
    return out;
  }

  private static String where(Map<String, String> opts) {
    return opts.getOrDefault("path", "") + "\u0000" + opts.getOrDefault("config", "");
  }

  /** Why the Python data source must read this (null: the JVM reader does). */
  static String delegation(Map<String, String> opts) {
    String planned = DELEGATES.get(where(opts));
    if (planned != null) return planned;
    String location = opts.getOrDefault("path", "");
    if (location.isEmpty()) location = LOCATIONS.getOrDefault(where(opts), "");
    String scheme = location.contains("://") ? location.substring(0, location.indexOf("://")) : "";
    if ((scheme.equals("s3") || scheme.equals("s3a")) && !hasS3a()) {
      return "the table is on S3 and this session has no s3a file system (hadoop-aws)";
    }
    return null;
  }

  private static boolean hasS3a() {
    try {
      Configuration conf = SparkSession.active().sessionState().newHadoopConf();
      return FileSystem.getFileSystemClass("s3a", conf) != null;
    } catch (Exception | LinkageError e) {
      return false;
    }
  }

  /** The Python data source, after the one-line notice of why (once per reason and JVM). */
  static TableProvider python(String reason) {
    TableProvider provider = pythonSource();
    if (NOTICED.add(reason)) System.err.println("stitchlake: " + reason + "; reading with the Python data source");
    return provider;
  }

  /** {@code stitchlake_python}, registered by {@code stitchlake.spark.session.register(spark)}. */
  static TableProvider pythonSource() {
    Option<TableProvider> found;
    try {
      found = DataSource$.MODULE$.lookupDataSourceV2(PYTHON_SOURCE, SQLConf.get());
    } catch (RuntimeException e) {
      found = Option.empty();
    }
    if (found.isEmpty()) {
      throw new StitchException("UsageError", 2, "this goes through the Python data source, which this session "
          + "has not registered: call stitchlake.spark.session.register(spark) first");
    }
    return found.get();
  }

  static Map<String, String> readOnly(Map<String, String> m) {
    return Collections.unmodifiableMap(m);
  }
}
