package io.stitchlake.spark.plan;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

/** The plan's {@code merge} object (docs/spark-reader.md): a row's identity and every stream's merge rules. */
public final class MergeSpec implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Key then partition columns. */
  public final List<ColumnSpec> common;
  /** Every stream of the table's current config, in order. */
  public final List<StreamSpec> streams;

  public MergeSpec(List<ColumnSpec> common, List<StreamSpec> streams) {
    this.common = common;
    this.streams = streams;
  }

  public static MergeSpec of(JsonNode node) {
    List<ColumnSpec> common = new ArrayList<>();
    for (JsonNode c : node.path("common")) common.add(ColumnSpec.of(c));
    List<StreamSpec> streams = new ArrayList<>();
    for (JsonNode s : node.path("streams")) streams.add(StreamSpec.of(s));
    return new MergeSpec(common, streams);
  }

  /** Parses the merge object's JSON text (what {@code Plan.mergeJson} holds). */
  public static MergeSpec parse(String json) {
    try {
      return of(Plan.JSON.readTree(json));
    } catch (IOException e) {
      throw new IllegalArgumentException("unreadable merge spec: " + e.getMessage(), e);
    }
  }

  public StreamSpec stream(String name) {
    for (StreamSpec s : streams) if (s.name.equals(name)) return s;
    return null;
  }
}
