package io.stitchlake.spark.plan;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

/** One stream of the plan's {@code merge} object: how its versions order and how nulls merge. */
public final class StreamSpec implements Serializable {
  private static final long serialVersionUID = 1L;

  /** One ordering component: ranked components hold the value (string, binary, decimal), others a long image. */
  public static final class Ordering implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String type;
    public final boolean ranked;

    public Ordering(String type, boolean ranked) {
      this.type = type;
      this.ranked = ranked;
    }
  }

  public final String name;
  /** {@code overwrite} or {@code ignore}. */
  public final String nulls;
  public final List<Ordering> ordering;
  public final List<ColumnSpec> columns;

  public StreamSpec(String name, String nulls, List<Ordering> ordering, List<ColumnSpec> columns) {
    this.name = name;
    this.nulls = nulls;
    this.ordering = ordering;
    this.columns = columns;
  }

  public boolean ignoresNulls() {
    return "ignore".equals(nulls);
  }

  /** The stream's meta column {@code _sl__<stream>__<field>}. */
  public String meta(String field) {
    return "_sl__" + name + "__" + field;
  }

  static StreamSpec of(JsonNode node) {
    List<Ordering> ordering = new ArrayList<>();
    for (JsonNode o : node.path("ordering")) {
      ordering.add(new Ordering(o.path("type").asText(), o.path("ranked").asBoolean(false)));
    }
    List<ColumnSpec> columns = new ArrayList<>();
    for (JsonNode c : node.path("columns")) columns.add(ColumnSpec.of(c));
    String nulls = node.path("nulls").asText("overwrite");
    if (!nulls.equals("overwrite") && !nulls.equals("ignore")) {
      throw new IllegalArgumentException("stream " + node.path("name").asText() + ": unknown nulls mode " + nulls);
    }
    return new StreamSpec(node.path("name").asText(), nulls, ordering, columns);
  }
}
