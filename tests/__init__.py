"""The test suite: tests/unit (fast, no JVM, no server, no subprocess `stitch`: `make test-fast`), tests/integration
(everything else) and tests/support (the fixtures, servers and table makers both tiers share). A test module imports
only from tests/support, never from another test module, and takes its tables from tests/support's makers
(tests/unit/test_tiers.py holds both rules)."""
