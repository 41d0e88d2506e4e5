"""Writing a table: input (a landing file or Kafka range) to validated events (`events`, `batch`), the bad-row
policy (`badrows`), and the write client that turns one batch into one deltacommit (`writer`)."""
