#!/usr/bin/env bash
# `make test`: pytest with one throwaway broker for the whole session
# (scripts/with-broker.sh stops it on every exit path and keeps pytest's status).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${VENV:-.venv}
# The soak (tests/soak) saturates the machine on purpose, so it runs alone, after
# the rest, never beside other tests that it would slow down. Arguments other
# than the xdist ones go to both runs; RUNLEDGER_SOAK_ROUNDS sizes it (default 2).
# SOAK=0 skips it (a quick local run), SOAK=only runs it alone (`make soak`).
soak=${SOAK:-1}
status=0
if [[ $soak != only ]]; then
    scripts/with-broker.sh "$venv/bin/python" -m pytest -q -m "not soak" "$@" || status=$?
fi
if [[ $soak != 0 && $status == 0 ]]; then
    args=()
    skip=0
    for a in "$@"; do  # one process: the soak's load is the only other work
        if (( skip )); then skip=0; continue; fi
        case $a in -n|--dist) skip=1 ;; -n*|--dist=*) ;; *) args+=("$a") ;; esac
    done
    scripts/with-broker.sh "$venv/bin/python" -m pytest -q -m soak tests/soak \
        ${args[@]+"${args[@]}"} || status=$?
fi
exit "$status"
