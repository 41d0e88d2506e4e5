"""A Structured Streaming query writing one stream's landing Parquet files into a stitchlake table.

Run as its own process by tests/integration/test_streaming.py, so it can be SIGKILLed mid-batch and restarted from its
checkpoint: `python stream_query.py CONFIG STREAM LANDING CHECKPOINT (continuous|available_now)`.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from stitchlake.spark.session import register


def main() -> None:
    config, stream, landing, checkpoint, mode = sys.argv[1:6]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[1]").appName("stream-query-test")
    for key, value in {
        "spark.ui.enabled": "false",
        "spark.driver.memory": "512m",
        "spark.sql.shuffle.partitions": "1",
        "spark.pyspark.python": sys.executable,
    }.items():
        builder = builder.config(key, value)
    spark = register(builder.getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema = spark.read.parquet(landing).schema
    frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(landing)
    writer = (
        frame.writeStream.format("stitchlake")
        .option("stream", stream)
        .option("config", config)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="0.5 seconds")
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
