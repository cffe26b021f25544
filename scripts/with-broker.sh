#!/usr/bin/env bash
# scripts/with-broker.sh COMMAND [ARGS...]: run COMMAND with RUNLEDGER_BOOTSTRAP
# pointing at a throwaway one-node secure broker in a temporary data directory,
# and RUNLEDGER_CREDENTIALS at its admin's credentials. The
# broker is stopped and its data removed on every exit path (pass, fail,
# Ctrl-C), and COMMAND's exit status is kept. `make test` and `make
# bench-smoke` run under it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=${VENV:-.venv}
work=$(mktemp -d "${TMPDIR:-/tmp}/runledger-broker.XXXXXX")
data_dir=$work/stack
# `stack up` remembers its stack in $RUNLEDGER_HOME/current-stack.json and `stack
# down` forgets it: this throwaway one is remembered in its own directory, so the
# user's current stack stays the one they started.
stack() { RUNLEDGER_HOME="$work/home" "$venv/bin/runledger" stack "$@"; }

cleanup() {
    stack down --data-dir "$data_dir" --purge >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

info=$(stack up --data-dir "$data_dir" --json)
field() { "$venv/bin/python" -c "import json, sys; print(json.load(sys.stdin)[\"$1\"] or '')" <<<"$info"; }
bootstrap=$(field bootstrap)
# Secure, as `runledger stack up` is by default: the command runs as the admin.
credentials=$(field credentials)
echo "throwaway broker at $bootstrap ($data_dir)" >&2

status=0
RUNLEDGER_BOOTSTRAP=$bootstrap RUNLEDGER_CREDENTIALS=$credentials "$@" || status=$?
exit "$status"
