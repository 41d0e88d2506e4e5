"""The test suite: tests/unit (fast, no JVM, no server, no subprocess `stitch`: `make test-fast`), tests/integration
(everything else) and tests/support (the fixtures, servers and table makers both tiers share)."""
