#!/usr/bin/env bash
# `make bench-smoke` (run by CI after the tests): every benchmark in its --quick
# form, against a throwaway broker that is stopped on every exit path. This
# proves each one still runs; nothing here asserts on a timing, and the figures
# printed on a shared CI machine are only for reading.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=${VENV:-.venv}
py="$venv/bin/python"
data_dir=$(mktemp -d "${TMPDIR:-/tmp}/runledger-bench.XXXXXX")

cleanup() {
    "$venv/bin/runledger" stack down --data-dir "$data_dir" --purge >/dev/null 2>&1 || true
    rm -rf "$data_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

info=$("$venv/bin/runledger" stack up --data-dir "$data_dir" --json)
bootstrap=$("$py" -c 'import json, sys; print(json.load(sys.stdin)["bootstrap"])' <<<"$info")

failed=()
for bench in bench/*.py; do
    case "$bench" in */common.py | */*_parts.py | */__init__.py) continue ;; esac
    args=(--quick)
    # The controller benchmark starts a stack of its own: its controller would
    # act on every run of a shared broker's log.
    grep -q -- '"--bootstrap"' "$bench" && [ "$bench" != bench/controller.py ] \
        && args+=(--bootstrap "$bootstrap")
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
