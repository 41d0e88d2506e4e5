package io.stitchlake.spark;

import io.stitchlake.spark.plan.ChangeSlice;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** The file groups whose changes one task of an incremental read reads (packed by the planner). */
final class ChangeInputPartition implements InputPartition {
  private static final long serialVersionUID = 1L;
  final List<ChangeSlice> groups;

  ChangeInputPartition(List<ChangeSlice> groups) {
    this.groups = groups;
  }
}
