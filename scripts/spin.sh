#!/usr/bin/env bash
# Installs Debian's spin (the SPIN model checker) and gcc for the protocol model
# (proof/protocol.pml, tests/proof/test_spin.py), only when either is missing.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/apt-ensure.sh" spin \
    "command -v spin >/dev/null && command -v gcc >/dev/null" spin gcc libc6-dev
