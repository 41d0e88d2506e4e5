"""Reading a table: the reader (`reader`: `scan`, `read`) over snapshot reads and the change feed, each streamed
as a `scan.Scan`; read filters and DuckDB SQL over a read."""
