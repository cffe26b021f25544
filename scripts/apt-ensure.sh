#!/usr/bin/env bash
# Usage: scripts/apt-ensure.sh LABEL CHECK PACKAGE...
# Installs Debian PACKAGEs when the shell test CHECK fails; a machine where it
# passes is left alone. `apt-get update` runs only when the install fails
# without it (a fresh machine has no package lists yet), and sudo is used only
# when not already root. scripts/chromium.sh and scripts/spin.sh call it.
set -euo pipefail

label=$1 check=$2
shift 2
if bash -c "$check"; then
    echo "$label: present" >&2
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
        echo "$label: missing, and this is not root without sudo; install it as root:" \
             "apt-get install -y $*" >&2
        exit 1
    fi
    sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
install=("${sudo[@]}" apt-get install -y --no-install-recommends "$@")
echo "$label: missing; running: ${install[*]}" >&2
if ! "${install[@]}"; then
    echo "$label: install failed; running: ${sudo[*]} apt-get update, then retrying" >&2
    "${sudo[@]}" apt-get update
    "${install[@]}"
fi
if ! bash -c "$check"; then
    echo "$label: still missing after installing $*" >&2
    exit 1
fi
echo "$label: installed" >&2
