#!/usr/bin/env bash
# scripts/native.sh: build runledger's compiled read path (native/, a Rust crate:
# Avro records to Arrow columns, issue #38) from source and install it into the
# venv as the module `runledger_native`. `make venv` runs it whenever native/
# changes. No prebuilt wheel is used: it needs cargo (Rust 1.89 or newer) and
# crates.io. Cargo's build directory is kept outside the clone, under
# ~/.cache/runledger/native-target, so a fresh clone rebuilds in seconds once a
# first build has run on the machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${VENV:-.venv}
# rustup puts cargo in ~/.cargo/bin and only a login shell's profile adds it to PATH.
cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
if ! command -v cargo >/dev/null 2>&1 && [[ -x $cargo_bin/cargo ]]; then
    export PATH=$cargo_bin:$PATH
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "scripts/native.sh: cargo is not on PATH; runledger's compiled read path" \
         "(native/) is built from source with Rust 1.89 or newer: install it" \
         "(https://rustup.rs), then run make venv again" >&2
    exit 1
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/runledger/native-target}
"$venv/bin/python" -m pip install -q 'maturin>=1.5,<2'
VIRTUAL_ENV=$(cd "$venv" && pwd) "$venv/bin/maturin" develop --release --quiet \
    --manifest-path native/Cargo.toml
"$venv/bin/python" -c "import runledger_native"
