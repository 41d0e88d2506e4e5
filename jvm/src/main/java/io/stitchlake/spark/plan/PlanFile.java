package io.stitchlake.spark.plan;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.LinkedHashMap;
import java.util.Map;

/** One data file of a slice, as the plan lists it (docs/spark-reader.md, "The plan document"). */
@JsonIgnoreProperties(ignoreUnknown = true)
public final class PlanFile implements Serializable {
  private static final long serialVersionUID = 1L;

  @JsonProperty public String path;
  @JsonProperty public String kind;
  @JsonProperty public String stream;
  @JsonProperty public long commit;
  @JsonProperty public String checksum = "";
  @JsonProperty public long bytes;
  @JsonProperty public long rows;
  @JsonProperty public String format = "parquet";
  /** Columns the file predates, with the literal (Spark internal form, as JSON text) its rows show. */
  public Map<String, String> absent = new LinkedHashMap<>();
  /** Columns stored under an older, narrower type: name to the stored type. */
  @JsonProperty public Map<String, String> types = new LinkedHashMap<>();

  // Kept as JSON text: a JsonNode literal would tie this serializable class to Jackson's node classes.
  @JsonProperty("absent")
  void setAbsent(Map<String, JsonNode> values) {
    absent = new LinkedHashMap<>();
    if (values != null) values.forEach((k, v) -> absent.put(k, v == null ? "null" : v.toString()));
  }

  public boolean isBase() {
    return "base".equals(kind);
  }

  @Override
  public String toString() {
    return path;
  }
}
