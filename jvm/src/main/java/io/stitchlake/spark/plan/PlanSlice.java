package io.stitchlake.spark.plan;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

/** A file slice: at most one base file and its logs in commit order. */
@JsonIgnoreProperties(ignoreUnknown = true)
public final class PlanSlice implements Serializable {
  private static final long serialVersionUID = 1L;

  @JsonProperty public String partition;
  @JsonProperty("file_group") public String fileGroup;
  @JsonProperty public PlanFile base;
  @JsonProperty public List<PlanFile> logs = new ArrayList<>();

  /** Read without a merge (rule 7): no logs, or a read-optimized plan (which lists none). */
  public boolean logFree() {
    return logs == null || logs.isEmpty();
  }

  public List<PlanFile> files() {
    List<PlanFile> out = new ArrayList<>();
    if (base != null) out.add(base);
    if (logs != null) out.addAll(logs);
    return out;
  }
}
