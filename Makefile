# The two commands of the quick start are `make demo` and `make test`; both create and reuse .venv/.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
NATIVE_SOURCES := $(shell find native -type f) CMakeLists.txt pyproject.toml

# Open MPI refuses to run as root without these (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: all build test suite test-mpi demo bench bench-deps clean wheel wheel-test docs petastorm-test

all: build

$(VENV)/.deps: requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --disable-pip-version-check -q -r requirements-dev.txt
	touch $@

# Rebuilds the extension (incrementally, in build/) whenever a native source changes.
$(VENV)/.built: $(VENV)/.deps $(NATIVE_SOURCES)
	$(PIP) install --disable-pip-version-check -q --no-build-isolation --no-deps -e .
	touch $@

build: $(VENV)/.built

# tests/mpi runs the collective and torch worker cases under `mpiexec -n 2` (and 3), with the MPI
# bootstrap + native ring and with the MPI data path; `make test-mpi` runs only those.
# `make wheel-test` (the built wheel installed in a fresh venv, and a packed env on executors) runs beside the
# suite: since the suite keeps one local[2] Spark session per process, CI has room for it (25.8 min without).
# --durations: every CI log names the slowest tests, which is where to look when CI nears its 40 minutes.
# Two test processes, a file each at a time (module fixtures stay in one process): most of the suite waits
# on JVMs and ranks rather than computing, so two files at once take about half the time on 2 cores.
# The slowest files go out first (tests/slow_files_first.py), so that neither process finishes alone.
# Petastorm's venv, the docs site and the wheel build beside the suite (-O keeps each one's output together).
TEST_WORKERS ?= 2
test: build
	$(MAKE) --no-print-directory -j4 -O suite petastorm-test docs wheel-test

suite: build
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=40 tests

# Petastorm needs an old stack (pyarrow 14, pyspark 4.0, numpy 1): its reader is tested in a venv of its own,
# with its own build of the extension. The main venv skips those tests (petastorm does not import there).
PETASTORM_VENV := .venv-petastorm
$(PETASTORM_VENV)/.built: requirements-petastorm.txt $(NATIVE_SOURCES)
	test -x $(PETASTORM_VENV)/bin/python || $(PYTHON) -m venv $(PETASTORM_VENV)
	$(PETASTORM_VENV)/bin/pip install --disable-pip-version-check -q --no-deps -r requirements-petastorm.txt
	$(PETASTORM_VENV)/bin/pip install --disable-pip-version-check -q --no-build-isolation --no-deps \
		-C build-dir=build/petastorm -e .
	touch $@

petastorm-test: $(PETASTORM_VENV)/.built
	$(PETASTORM_VENV)/bin/python -m pytest -q tests/data/with_petastorm

# Manylinux wheels for CPython 3.10-3.13 in dist/, compiled by zig's clang against glibc 2.26 (no container),
# each checked by auditwheel; a CPython this machine lacks is named and the target fails after the others.
WHEEL_VENV := .venv-wheel
WHEEL_PYTHONS ?= 3.10 3.11 3.12 3.13
$(WHEEL_VENV)/.deps: requirements-wheel.txt
	test -x $(WHEEL_VENV)/bin/python || $(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install --disable-pip-version-check -q -r requirements-wheel.txt
	touch $@

wheel: $(WHEEL_VENV)/.deps
	$(WHEEL_VENV)/bin/python wheels/build.py $(addprefix --python ,$(WHEEL_PYTHONS))

# The package as a user installs it: this machine's CPython's wheel, in fresh venvs outside the source tree,
# runs a 2-rank numpy job and spark_hvd.run, and ships to standalone executors as a packed venv.
PY_VERSION = $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
wheel-test: build
	$(MAKE) wheel WHEEL_PYTHONS=$(PY_VERSION)
	$(PY) -m pytest -q tests/install tests/spark/test_packed_env_standalone.py \
		--wheel=$$(ls dist/spark_hvd-*-cp$(subst .,,$(PY_VERSION))-*manylinux*.whl)

# The documentation site (mkdocs Material + mkdocstrings) into site/; --strict: a broken link or API
# reference fails the build. tests/docs/check_site.py then fails it where a page shows markdown left as
# text (a definition list without def_list, a list or table without its blank line), which --strict misses.
DOCS_VENV := .venv-docs
$(DOCS_VENV)/.deps: requirements-docs.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install --disable-pip-version-check -q -r requirements-docs.txt
	touch $@

docs: $(DOCS_VENV)/.deps
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict -q
	$(DOCS_VENV)/bin/python tests/docs/check_site.py --docs docs --site site

test-mpi: build
	$(PY) -m pytest -q tests/mpi

demo: build
	$(PY) examples/spark_digits.py

# bench/input_pipeline.py's peers: Mosaic Streaming (requirements-bench.txt, --no-deps so that nothing moves
# torch or numpy) here, and Pillow in the Petastorm venv for its shared JPEG decode.
$(VENV)/.bench-deps: $(VENV)/.deps requirements-bench.txt
	$(PIP) install --disable-pip-version-check -q --no-deps -r requirements-bench.txt
	touch $@

$(PETASTORM_VENV)/.bench-deps: $(PETASTORM_VENV)/.built requirements-bench-petastorm.txt
	$(PETASTORM_VENV)/bin/pip install --disable-pip-version-check -q --no-deps -r requirements-bench-petastorm.txt
	touch $@

bench-deps: $(VENV)/.bench-deps $(PETASTORM_VENV)/.bench-deps

bench: build bench-deps
	$(PY) bench/allreduce.py
	$(PY) bench/torch_step.py
	$(PY) bench/keras_step.py
	$(PY) bench/spark_run.py
	$(PY) bench/connect_run.py
	$(PY) bench/estimator.py
	$(PY) bench/input_pipeline.py

clean:
	rm -rf build dist site $(VENV)/.built
