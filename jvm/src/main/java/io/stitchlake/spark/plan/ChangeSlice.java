package io.stitchlake.spark.plan;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

/**
 * One file group's share of an incremental read (docs/spark-reader.md, "Incremental reads"): its slice as of
 * {@code until}, the slices as of {@code since} its keys were in, the files whose keys are the candidates and the
 * keys erased. The Python planner chose all of it; the task reads, merges and diffs.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public final class ChangeSlice implements Serializable {
  private static final long serialVersionUID = 1L;

  /** A data file a deltacommit of the range added: its keys in this group are candidates. */
  @JsonIgnoreProperties(ignoreUnknown = true)
  public static final class Carried implements Serializable {
    private static final long serialVersionUID = 1L;
    @JsonProperty public PlanFile file;
    @JsonProperty("commit_time") public String commitTime;
    @JsonProperty public String stream;
    /** The bucket count its keys were routed with: when it is not the group's, each key is hashed again. */
    @JsonProperty public int buckets;
  }

  @JsonProperty public String partition;
  @JsonProperty("file_group") public String fileGroup;
  /** The partition's bucket count as of {@code until} (the group is numbered under it). */
  @JsonProperty public int buckets;
  @JsonProperty public PlanSlice after;
  @JsonProperty public List<PlanSlice> before = new ArrayList<>();
  @JsonProperty public List<Carried> carried = new ArrayList<>();
  /** Erased keys: the common columns' literals, then the erase's completion time and "erase", as JSON texts. */
  public List<List<String>> erased = new ArrayList<>();

  // Kept as JSON text, as PlanFile's literals are: no Jackson node in a serializable class.
  @JsonProperty("erased")
  void setErased(List<List<JsonNode>> rows) {
    erased = new ArrayList<>();
    if (rows == null) return;
    for (List<JsonNode> row : rows) {
      List<String> cells = new ArrayList<>();
      for (JsonNode cell : row) cells.add(cell == null ? "null" : cell.toString());
      erased.add(cells);
    }
  }

  /** The data files the slices name (their bytes weigh the task). */
  public List<PlanFile> files() {
    List<PlanFile> out = new ArrayList<>();
    if (after != null) out.addAll(after.files());
    for (PlanSlice s : before) out.addAll(s.files());
    return out;
  }
}
