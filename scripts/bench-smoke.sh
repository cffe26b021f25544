#!/usr/bin/env bash
# `make bench-smoke` (run by CI after the tests): every benchmark in its --quick
# form, against a throwaway broker (scripts/with-broker.sh). This proves each
# one still runs; nothing here asserts on a timing, and the figures printed on a
# shared CI machine are only for reading.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -z "${RUNLEDGER_BOOTSTRAP:-}" ]; then
    exec scripts/with-broker.sh "$0" "$@"
fi
py="${VENV:-.venv}/bin/python"
failed=()
for bench in bench/*.py; do
    case "$bench" in */common.py | */*_parts.py | */__init__.py) continue ;; esac
    args=(--quick)
    # The controller benchmark starts a stack of its own: its controller would
    # act on every run of a shared broker's log.
    grep -q -- '"--bootstrap"' "$bench" && [ "$bench" != bench/controller.py ] \
        && args+=(--bootstrap "$RUNLEDGER_BOOTSTRAP")
    echo "== $bench ${args[*]}"
    started=$SECONDS
    if "$py" "$bench" "${args[@]}"; then
        echo "== $bench: ok in $((SECONDS - started)) s"
    else
        echo "== $bench: FAILED (exit $?)" >&2
        failed+=("$bench")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "benchmarks that did not run: ${failed[*]}" >&2
    exit 1
fi
