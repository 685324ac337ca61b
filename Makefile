# The two commands of the quick start are `make demo` and `make test`; both create and reuse .venv/.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
NATIVE_SOURCES := $(shell find native -type f) CMakeLists.txt pyproject.toml

# Open MPI refuses to run as root without these (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: all build test test-mpi demo bench clean

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
test: build
	$(PY) -m pytest -q tests

test-mpi: build
	$(PY) -m pytest -q tests/mpi

demo: build
	$(PY) examples/spark_digits.py

bench: build
	$(PY) bench/allreduce.py
	$(PY) bench/torch_step.py
	$(PY) bench/spark_run.py

clean:
	rm -rf build $(VENV)/.built
