"""What the tiers share: pytest plugins for the servers and Spark, table makers, the reference model."""
