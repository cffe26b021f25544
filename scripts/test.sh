#!/usr/bin/env bash
# `make test`: one throwaway broker for the whole pytest session. The broker is
# stopped on every exit path (pass, fail, Ctrl-C) and pytest's exit code is kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=${VENV:-.venv}
runledger="$venv/bin/runledger"
data_dir=$(mktemp -d "${TMPDIR:-/tmp}/runledger-test.XXXXXX")

cleanup() {
    "$runledger" stack down --data-dir "$data_dir" --purge >/dev/null 2>&1 || true
    rm -rf "$data_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

info=$("$runledger" stack up --data-dir "$data_dir" --json)
bootstrap=$("$venv/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["bootstrap"])' <<<"$info")
echo "test broker at $bootstrap ($data_dir)" >&2

status=0
RUNLEDGER_BOOTSTRAP=$bootstrap "$venv/bin/python" -m pytest -q "$@" || status=$?
exit "$status"
