"""The unit tier: in-process tests with no JVM, no server and no `stitch` subprocess (`make test-fast`)."""
