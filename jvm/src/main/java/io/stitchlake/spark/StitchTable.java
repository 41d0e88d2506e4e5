package io.stitchlake.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A stitched table: read by the JVM reader; written (batch and streaming) by the Python data source. */
public final class StitchTable implements Table, SupportsRead, SupportsWrite {
  private final StructType schema;
  private final Transform[] partitioning;
  private final Map<String, String> properties;
  /**
   * What the Python data source's table adds (its writes), once found: finding that source looks through every
   * registered one, and Spark asks a table's capabilities several times in each query it plans.
   */
  private static volatile Set<TableCapability> pythonCapabilities;

  StitchTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    this.schema = schema;
    this.partitioning = partitioning;
    this.properties = properties;
  }

  @Override
  public String name() {
    String path = properties.getOrDefault("path", properties.getOrDefault("config", ""));
    return "stitchlake " + path;
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Transform[] partitioning() {
    return partitioning;
  }

  @Override
  public Map<String, String> properties() {
    return properties;
  }

  @Override
  public Set<TableCapability> capabilities() {
    Set<TableCapability> out = EnumSet.of(
        TableCapability.BATCH_READ, TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE);
    Set<TableCapability> python = pythonCapabilities;
    if (python == null) {
      try {
        Set<TableCapability> found = EnumSet.noneOf(TableCapability.class);
        found.addAll(pythonTable().capabilities());
        pythonCapabilities = python = found;
      } catch (StitchException e) {
        // not registered (nothing kept, so a later registration counts): reads still work, a write fails with the
        // message saying how to register it
        python = EnumSet.noneOf(TableCapability.class);
      }
    }
    out.addAll(python);
    out.remove(TableCapability.MICRO_BATCH_READ);
    out.remove(TableCapability.CONTINUOUS_READ);
    return out;
  }

  private Table pythonTable() {
    TableProvider python = StitchSource.pythonSource();
    return python.getTable(schema, partitioning, properties);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    Map<String, String> all = new HashMap<>(StitchSource.lower(properties));
    all.putAll(StitchSource.lower(options.asCaseSensitiveMap()));
    return new StitchScanBuilder(schema, all);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    Table python = pythonTable();
    if (!(python instanceof SupportsWrite)) {
      throw new StitchException("UsageError", 2, "the Python data source cannot write this table");
    }
    return ((SupportsWrite) python).newWriteBuilder(info);
  }
}
