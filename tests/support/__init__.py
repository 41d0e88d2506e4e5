"""What the test modules share, and the only place they share it from: pytest plugins for the servers, Spark and the
fixtures of several modules (tests/conftest.py registers them), table makers, helpers, the reference model."""
