#!/usr/bin/env bash
# `make test`: pytest with one throwaway broker for the whole session
# (scripts/with-broker.sh stops it on every exit path and keeps pytest's status).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${VENV:-.venv}
exec scripts/with-broker.sh "$venv/bin/python" -m pytest -q "$@"
