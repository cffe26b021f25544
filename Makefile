# runledger developer entry points. `make test` works on a fresh machine with
# python3.11, java 17+, mvn and cargo (Rust 1.89+) on PATH: it builds .venv (the
# compiled read path in native/ from source, scripts/native.sh), fetches the Kafka jars
# into ~/.cache/runledger (outside the clone), starts a throwaway broker, runs
# pytest against it and always stops it again. It installs Debian's chromium
# (scripts/chromium.sh) for the report's browser test and Debian's spin
# (scripts/spin.sh) for the protocol model's check when they are missing.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
RUNLEDGER := $(VENV)/bin/runledger
# Re-install only when pyproject.toml is newer than this stamp.
STAMP := $(VENV)/.installed-stamp
# The compiled read path (native/, Rust), rebuilt when any of its sources changes.
NATIVE_STAMP := $(VENV)/.native-stamp
NATIVE_SOURCES := native/Cargo.toml native/pyproject.toml $(wildcard native/src/*.rs)
PYTEST_ARGS ?=
# Two pytest workers, each taking whole test files: most of the suite's time is
# end-to-end tests waiting on brokers and workers, not CPU. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
STACK_ARGS ?=
# e.g. make demo DEMO_ARGS='--work-dir /tmp/rl-demo --keep-stack'
DEMO_ARGS ?=

.PHONY: venv jars chromium spin proof test soak lint bench-smoke stack-up stack-down demo

venv: $(STAMP) $(NATIVE_STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(NATIVE_STAMP): $(NATIVE_SOURCES) scripts/native.sh $(STAMP)
	VENV=$(VENV) scripts/native.sh
	touch $@

jars: venv
	$(RUNLEDGER) stack jars

# Debian's chromium, for the HTML report's browser test (installed once, as root).
chromium:
	scripts/chromium.sh

# Debian's spin and gcc, for the protocol model's check (installed once, as root).
spin:
	scripts/spin.sh

# The protocol model under SPIN (every property, the liveness claim, each mutant),
# its traces replayed against the real core, the real core under simulation, and every
# one-line mutant of the pure core judged by the simulation and the traces alone.
proof: $(STAMP) spin
	$(PY) -m proof.spin
	$(PY) -m proof.traces --seeds 1000
	$(PY) -m proof.sim --seeds 10000
	$(PY) -m proof.mutants

test: jars chromium spin
	scripts/test.sh $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

# The load soak alone, longer than in `make test` (tests/soak: every classifying
# scenario on a saturated machine); SOAK_ROUNDS=N sets how many rounds.
SOAK_ROUNDS ?= 5
soak: jars
	SOAK=only RUNLEDGER_SOAK_ROUNDS=$(SOAK_ROUNDS) scripts/test.sh $(PYTEST_ARGS)

# Every benchmark's --quick form against a throwaway broker: they still run
# (figures printed, nothing asserted on time). CI runs it after the tests.
bench-smoke: jars
	scripts/bench-smoke.sh

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

stack-up: jars
	$(RUNLEDGER) stack up $(STACK_ARGS)

stack-down: $(STAMP)
	$(RUNLEDGER) stack down $(STACK_ARGS)

# The whole system on this machine: a broker in a fresh work directory, the
# controller, projector and an agent, a torch run with an injected kill, its
# recovery, the queries and the HTML report; everything is stopped at the end.
demo: jars
	$(RUNLEDGER) demo $(DEMO_ARGS)
