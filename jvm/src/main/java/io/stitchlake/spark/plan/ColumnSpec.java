package io.stitchlake.spark.plan;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;

/** A column of the plan's {@code merge} object: name, stitchlake type and (stream columns) the current default. */
public final class ColumnSpec implements Serializable {
  private static final long serialVersionUID = 1L;

  public final String name;
  /** A stitchlake type name: {@code long}, {@code decimal(6,2)}, {@code array<string>}, ... */
  public final String type;
  /** The default literal as JSON text in Spark's internal form; null when the column has none. */
  public final String defaultJson;

  public ColumnSpec(String name, String type, String defaultJson) {
    this.name = name;
    this.type = type;
    this.defaultJson = defaultJson;
  }

  static ColumnSpec of(JsonNode node) {
    JsonNode d = node.get("default");
    return new ColumnSpec(
        node.path("name").asText(), node.path("type").asText(), d == null || d.isNull() ? null : d.toString());
  }
}
