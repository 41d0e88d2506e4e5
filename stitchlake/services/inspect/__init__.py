"""Reading the table's state from metadata: status, the timeline listing, metadata tables, the report."""
