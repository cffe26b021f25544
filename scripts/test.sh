#!/usr/bin/env bash
# `make test`: pytest with one throwaway broker for the whole session
# (scripts/with-broker.sh stops it on every exit path and keeps pytest's status).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${VENV:-.venv}
# The suite gets a home of its own, removed at the end: nothing in the user's home
# (the stack `stack up` remembered there, a dataset catalog, ~/.config) can change
# its result, and it leaves nothing there. What it needs from the real home is
# found first: the Kafka jars (RUNLEDGER_CACHE; `make jars` fetched them) and
# Maven's repository, should the jars be fetched again. The venv is the clone's.
export RUNLEDGER_CACHE=${RUNLEDGER_CACHE:-$HOME/.cache/runledger}
case ${MAVEN_OPTS:-} in
    *maven.repo.local*) ;;
    *) export MAVEN_OPTS="${MAVEN_OPTS:+$MAVEN_OPTS }-Dmaven.repo.local=$HOME/.m2/repository" ;;
esac
suite=$(mktemp -d "${TMPDIR:-/tmp}/runledger-suite.XXXXXX")
trap 'rm -rf "$suite"' EXIT
trap 'exit 130' INT TERM
export HOME=$suite/home XDG_CONFIG_HOME=$suite/config XDG_DATA_HOME=$suite/data \
    XDG_CACHE_HOME=$suite/cache XDG_STATE_HOME=$suite/state RUNLEDGER_HOME=$suite/runledger
mkdir -p "$HOME" "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$XDG_STATE_HOME"
# Nor the user's RUNLEDGER_* settings (a catalog, a key, a broker, a fault to inject);
# only the jar cache and the soak's size are the caller's to give (and the mark of
# a test run this one is part of, tests/reaper.py, so its processes die with it).
for name in $(compgen -e); do
    case $name in
        RUNLEDGER_CACHE|RUNLEDGER_SOAK_ROUNDS|RUNLEDGER_HOME|RUNLEDGER_TEST_RUN) ;;
        RUNLEDGER_*) unset "$name" ;;
    esac
done
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
