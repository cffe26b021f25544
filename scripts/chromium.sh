#!/usr/bin/env bash
# Installs Debian's chromium for the HTML report's browser test
# (tests/queries/test_report.py), only when /usr/bin/chromium is missing.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/apt-ensure.sh" chromium "test -x /usr/bin/chromium" chromium
