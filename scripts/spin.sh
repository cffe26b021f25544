#!/usr/bin/env bash
# Installs Debian's spin (the SPIN model checker) and gcc for the protocol model
# (proof/protocol.pml, tests/proof/test_spin.py), only when either is missing.
# Idempotent, like scripts/chromium.sh: `apt-get update` runs only when the
# install fails without it, and sudo is used only when not already root.
set -euo pipefail

if command -v spin >/dev/null && command -v gcc >/dev/null; then
    echo "spin: present ($(spin -V 2>/dev/null | head -1))" >&2
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
        echo "spin: spin or gcc is missing and this is not root without sudo;" \
             "install them as root: apt-get install -y spin gcc" >&2
        exit 1
    fi
    sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
install=("${sudo[@]}" apt-get install -y --no-install-recommends spin gcc libc6-dev)
echo "spin: missing; running: ${install[*]}" >&2
if ! "${install[@]}"; then
    echo "spin: install failed; running: ${sudo[*]} apt-get update, then retrying" >&2
    "${sudo[@]}" apt-get update
    "${install[@]}"
fi
echo "spin: installed $(spin -V 2>/dev/null | head -1)" >&2
