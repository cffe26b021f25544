#!/usr/bin/env bash
# Installs Debian's chromium for the HTML report's browser test
# (tests/queries/test_report.py), only when /usr/bin/chromium is missing.
# Idempotent: a machine that has it is left alone. `apt-get update` runs only
# when the install fails without it (a fresh machine has no package lists yet),
# and sudo is used only when not already root.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
    echo "chromium: present at /usr/bin/chromium ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))" >&2
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null; then
        echo "chromium: /usr/bin/chromium is missing and this is not root without sudo;" \
             "install it as root: apt-get install -y chromium" >&2
        exit 1
    fi
    sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
install=("${sudo[@]}" apt-get install -y --no-install-recommends chromium)
echo "chromium: missing; running: ${install[*]}" >&2
if ! "${install[@]}"; then
    echo "chromium: install failed; running: ${sudo[*]} apt-get update, then retrying" >&2
    "${sudo[@]}" apt-get update
    "${install[@]}"
fi
echo "chromium: installed $(/usr/bin/chromium --version 2>/dev/null || echo '(version unknown)')" >&2
