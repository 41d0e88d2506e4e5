package io.stitchlake.spark.plan;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/** A {@code stitchlake.plan/2} document: what one read reads, as the Python planner planned it. */
@JsonIgnoreProperties(ignoreUnknown = true)
public final class Plan implements Serializable {
  private static final long serialVersionUID = 1L;
  public static final String FORMAT = "stitchlake.plan/2";
  public static final ObjectMapper JSON =
      new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

  @JsonProperty public String format;
  @JsonProperty public String table;
  @JsonProperty public String mode = "snapshot";
  @JsonProperty("as_of") public String asOf;
  @JsonProperty public String delegate;
  @JsonProperty public List<String> columns;
  @JsonProperty("hadoop_conf") public Map<String, String> hadoopConf = new LinkedHashMap<>();
  @JsonProperty public List<PlanSlice> slices = new ArrayList<>();
  @JsonProperty public List<List<Integer>> partitions = new ArrayList<>();
  @JsonProperty("filters_used") public List<Integer> filtersUsed = new ArrayList<>();
  /** An incremental read's range (null for a snapshot read); its work is {@link #changeSlices}. */
  @JsonProperty public Changes changes;
  @JsonProperty("change_slices") public List<ChangeSlice> changeSlices = new ArrayList<>();
  /** The table's timeline and the latest completion the planner saw: a file gone since is not damage. */
  @JsonProperty public String timeline;
  @JsonProperty("planned_at") public String plannedAt;
  /** The Spark schema of every column (JSON text), and the merge object as JSON text (J2's MergeSpec parses it). */
  public String schemaJson;
  public String mergeJson;
  /** The merge object read for the log-free path (common columns, streams, defaults). */
  public MergeView merge;

  @JsonProperty("schema")
  void setSchema(JsonNode node) {
    schemaJson = node == null ? null : node.toString();
  }

  @JsonProperty("merge")
  void setMerge(JsonNode node) {
    mergeJson = node == null ? null : node.toString();
    merge = node == null ? null : MergeView.of(node);
  }

  /** What an incremental read reports: the changes in (since, until], updates as two rows with before-images. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public static final class Changes implements Serializable {
    private static final long serialVersionUID = 1L;
    @JsonProperty public String since;
    @JsonProperty public String until;
    @JsonProperty("before_images") public boolean beforeImages;
    /** The key columns, in the order the bucket hash takes them. */
    @JsonProperty public List<String> keys = new ArrayList<>();
  }

  public StructType schema() {
    return (StructType) DataType.fromJson(schemaJson);
  }

  public static Plan parse(String json) {
    try {
      Plan plan = JSON.readValue(json, Plan.class);
      if (!FORMAT.equals(plan.format)) {
        throw new IllegalArgumentException("not a " + FORMAT + " document (format: " + plan.format + ")");
      }
      return plan;
    } catch (IOException e) {
      throw new IllegalArgumentException("unreadable stitchlake plan: " + e.getMessage(), e);
    }
  }

  /** A plan given as JSON text, or as the path of a file holding it. */
  public static Plan load(String jsonOrPath) {
    String text = jsonOrPath.trim();
    if (!text.startsWith("{")) {
      try {
        text = Files.readString(Path.of(text), StandardCharsets.UTF_8);
      } catch (IOException e) {
        throw new IllegalArgumentException("cannot read the plan file " + jsonOrPath + ": " + e.getMessage(), e);
      }
    }
    return parse(text);
  }
}
