package io.stitchlake.spark;

import io.stitchlake.spark.plan.PlanSlice;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** The file slices one task reads (packed by the planner as Spark packs files). */
final class SliceInputPartition implements InputPartition {
  private static final long serialVersionUID = 1L;
  final List<PlanSlice> slices;

  SliceInputPartition(List<PlanSlice> slices) {
    this.slices = slices;
  }
}
