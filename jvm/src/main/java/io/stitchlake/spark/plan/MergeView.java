package io.stitchlake.spark.plan;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

/**
 * What the log-free path needs of the plan's {@code merge} object: the common columns, and per stream its value
 * columns with their defaults. The full merge spec (orderings, nulls) is J2's {@code MergeSpec}.
 */
public final class MergeView implements Serializable {
  private static final long serialVersionUID = 1L;

  /** A stream's value column: name, stitchlake type, default literal as JSON text ("null": none). */
  public static final class Column implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String name;
    public final String type;
    public final String defaultJson;

    Column(String name, String type, String defaultJson) {
      this.name = name;
      this.type = type;
      this.defaultJson = defaultJson;
    }
  }

  public static final class Stream implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String name;
    public final List<Column> columns = new ArrayList<>();

    Stream(String name) {
      this.name = name;
    }

    /** The stream's delete flag in a base file: null where it has no group, true for a tombstone. */
    public String delColumn() {
      return "_sl__" + name + "__del";
    }
  }

  public final List<String> common = new ArrayList<>();
  public final List<Stream> streams = new ArrayList<>();

  static MergeView of(JsonNode node) {
    MergeView view = new MergeView();
    for (JsonNode c : node.path("common")) view.common.add(c.path("name").asText());
    for (JsonNode s : node.path("streams")) {
      Stream stream = new Stream(s.path("name").asText());
      for (JsonNode c : s.path("columns")) {
        JsonNode d = c.get("default");
        stream.columns.add(new Column(c.path("name").asText(), c.path("type").asText(), d == null ? "null" : d.toString()));
      }
      view.streams.add(stream);
    }
    return view;
  }
}
