"""The integration tier: Spark, the servers (S3, ZooKeeper, Kafka, Trino, a Spark cluster) and the real CLI."""
