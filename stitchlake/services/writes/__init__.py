"""Writing rows in: ingest of landing files and Kafka topics, and Structured Streaming's micro-batches."""
