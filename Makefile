# stitchlake — `make demo` and `make test` are all a newcomer needs (Python 3.11+, Java 17+).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CLASS_ARCHIVE := $(VENV)/jars/spark-classes.jsa
JAVA_BIN := $(realpath $(shell command -v java 2>/dev/null))
JAVA_BASE_ARCHIVE := $(wildcard $(dir $(JAVA_BIN))../lib/server/classes.jsa)
PYTEST_ARGS ?=

.PHONY: help setup check-tools test-tools bytecode jvm conformance demo test test-fast lint bench bench-peers bench-scale torture partitions clean

help:
	@echo "make setup  - create .venv and install stitchlake with its dev tools (the other targets do it first)"
	@echo "make jvm    - build the Spark reader jar (jvm/, Maven) into $(VENV)/jars/stitchlake-spark.jar"
	@echo "make conformance - the JVM merge against the Python merge on many generated tables (CONFORMANCE_EXAMPLES=2000)"
	@echo "make demo   - set up .venv, generate a 3-stream dataset, ingest it with spark-submit, check it"
	@echo "make test-fast - the unit tier (tests/unit: no JVM, no server, no stitch subprocess), under 2 minutes: run it on every change"
	@echo "make test   - set up .venv, lint, run the whole test suite (tests/unit and tests/integration; what CI runs)"
	@echo "make lint   - ruff check + format check, import layers (lint-imports), types (mypy)"
	@echo "make bench  - benchmarks -> docs/benchmarks.md (BENCH_ARGS='--sizes 200000')"
	@echo "make bench-scale - the bench workload at 30M keys on Spark, every process's memory (~20 min on 2 cores, ~15 GB disk)"
	@echo "make bench-peers - stitchlake, Hudi, Paimon, Delta, Iceberg on Spark, same job -> docs/benchmarks.md (PEERS_ARGS='--sizes 200000 --json peers.json')"
	@echo "make torture- the long crash/concurrency torture run (TORTURE_ARGS='--rounds 50')"
	@echo "make partitions - writers, ZooKeeper and S3 on network namespaces, cut apart mid-commit (root; ROUNDS=50, SEED=)"

check-tools:
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || { \
	  echo "error: stitchlake needs Python 3.11 or newer; '$(PY)' is $$($(PY) --version 2>&1 | head -n1)."; \
	  echo "       Install it, or point make at it: make PY=/path/to/python3.11 ..."; exit 1; }
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: stitchlake runs its jobs on Spark, which needs Java 17 or newer; 'java' is not on PATH."; \
	  echo "       Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless"; exit 1; }
	@major=$$(java -version 2>&1 | awk -F'"' '/version/ {print $$2; exit}' | awk -F. '{print ($$1 == "1") ? $$2 : $$1}'); \
	  if [ -z "$$major" ] || [ "$$major" -lt 17 ]; then \
	    echo "error: stitchlake needs Java 17 or newer for Spark; found Java $$major."; exit 1; fi

$(STAMP): pyproject.toml
	@echo "setting up $(VENV) (first run downloads pyspark, ~5 minutes on a slow line)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

setup: check-tools $(STAMP) jvm $(CLASS_ARCHIVE) bytecode

# The project's modules byte-compiled for every process a target starts. Where PYTHONDONTWRITEBYTECODE is set (as in
# some CI environments) Python never writes them itself, and each `stitch`, Spark Python worker, planner and torture
# worker compiled the whole package from source again: a small `stitch read` took 0.97 s of CPU against 0.80 s with
# them (docs/benchmarks.md). Up to date, this takes a fraction of a second; a module edited after it is compiled in
# memory, as before, until the next run.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 stitchlake scripts tests examples

# The JVM Spark reader (docs/spark-reader.md): rebuilt when a source under jvm/ is newer than the jar. Spark itself is
# `provided`; the first build downloads its modules into ~/.m2 (about 300 MB, once per machine).
JAR := $(VENV)/jars/stitchlake-spark.jar
JVM_SOURCES := $(shell find jvm -type f -not -path 'jvm/target/*' 2>/dev/null)

jvm: $(JAR)

# Maven is the one on PATH, else Apache Maven from Maven Central, installed into $(VENV) the first time.
$(JAR): $(JVM_SOURCES)
	@echo "building the Spark reader ($(JAR))"
	@mvn="$$($(PY) -m scripts.maven_jars --mvn)" && cd jvm && "$$mvn" -q -B package -DskipTests
	@mkdir -p $(dir $(JAR))
	@cp jvm/target/stitchlake-spark.jar $(JAR)

# A class-data-sharing archive of Spark's classes, mapped by stitchlake's Spark drivers (half their start-up CPU;
# stitchlake/jobs/spark_conf.py, class_archive): made again when the environment, Java or its own base archive
# changes (CLASS_ARCHIVE above). A failed build is a warning: drivers then start the ordinary way.
$(CLASS_ARCHIVE): $(STAMP) $(JAVA_BIN) $(JAVA_BASE_ARCHIVE) scripts/spark_class_archive.py
	@echo "building the Spark class-data-sharing archive ($(CLASS_ARCHIVE), about a minute)"
	@$(BIN)/python -m scripts.spark_class_archive || echo "warning: Spark drivers will start without a class archive"

# The JVM merge against the Python merge on many more generated tables than `make test` runs (CONFORMANCE_EXAMPLES).
conformance: setup test-tools
	CONFORMANCE_EXAMPLES=$${CONFORMANCE_EXAMPLES:-2000} SPARK_READ_EXAMPLES=$${SPARK_READ_EXAMPLES:-200} $(EATMYDATA) $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder tests/integration/test_jvm_conformance.py tests/integration/test_jvm_conformance_alters.py tests/integration/test_jvm_reader.py::test_generated_tables_read_through_spark_with_pruned_columns_and_filters_match_stitch_read $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# Two workers (TEST_WORKERS=0 runs in this process), a test file never split between them: its module-scoped
# fixtures run once. The workers share the session servers (tests/support/session_servers.py). Files are handed
# out in the order tests/conftest.py gives them (the slowest first): xdist's own order, most tests first, would
# leave the one-test benchmark smoke runs, minutes each, for last.
TEST_WORKERS ?= 2
test: setup lint test-tools
	$(EATMYDATA) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The unit tier only: needs the venv but not Java, Maven or the jar (tests/conftest.py fails a unit test that starts a
# JVM or the CLI). No lint here: `make lint` is its own step.
test-fast: $(STAMP) test-tools bytecode
	$(EATMYDATA) $(BIN)/python -m pytest tests/unit -q $(PYTEST_ARGS)

# The test targets run the suite under Debian's eatmydata where it is installed (test-tools installs it as root, as
# the suite installs its servers): fsync and its kin return at once in every process of the suite. What fsync buys is
# a table that survives a power cut, and no test cuts the power (the crash tests kill processes, whose writes the
# kernel keeps), while a table's commit fsyncs each timeline, lock and marker file and its folder: the suite's
# workers waited on the disk with a core idle (docs/benchmarks.md, "The suite on a busy machine"). Without it, the
# suite runs the same tests with real fsyncs. `make demo`, the benchmarks and stitchlake itself never use it.
EATMYDATA = $(shell command -v eatmydata 2>/dev/null)

test-tools: $(STAMP)
	@command -v eatmydata >/dev/null 2>&1 || $(BIN)/python -c 'from scripts.local_daemons import apt_install; \
	  why = apt_install(["eatmydata"]); print(f"note: the suite runs with real fsyncs ({why})" if why else "installed eatmydata")'

demo: setup
	$(BIN)/python -m scripts.demo $(DEMO_ARGS)

bench: setup
	$(BIN)/python -m scripts.bench $(BENCH_ARGS)

bench-scale: setup
	$(BIN)/python -m scripts.bench_scale $(BENCH_SCALE_ARGS)

bench-peers: setup
	$(BIN)/python -m scripts.bench_peers $(PEERS_ARGS)

torture: setup
	$(BIN)/python -m scripts.torture $(TORTURE_ARGS)

# Issue 37: each round new writer hosts (network namespaces) and a random fault at a point of a commit; a failing
# round prints the command that replays it. Needs root (namespaces, iptables).
partitions: setup
	$(BIN)/python -m scripts.partitions --rounds $(or $(ROUNDS),50) $(if $(SEED),--seed $(SEED)) $(PARTITIONS_ARGS)

clean:
	rm -rf demo bench-data .pytest_cache .ruff_cache jvm/target
