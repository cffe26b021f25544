#!/usr/bin/env bash
# `make bench-smoke` (run by CI after the tests): every benchmark in its --quick
# form through bench/run_all.py, which starts a throwaway broker
# (scripts/with-broker.sh) unless RUNLEDGER_BOOTSTRAP names one, runs each
# benchmark as its own process, prints one table of ratios and exits 1 when one
# failed. This proves each one still runs; nothing here asserts on a timing,
# and the figures printed on a shared CI machine are only for reading.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export VENV="${VENV:-.venv}"
exec "$VENV/bin/python" bench/run_all.py --quick "$@"
