#!/bin/sh
# compose.yaml's `keys` job, as the admin: make the stack's signing keys once and
# register them on runledger.keys exactly as `runledger stack up` does
# (runledger.stack.keys.ensure_keys: the admin's key the self-signed anchor, then
# the controller's and the operator's, each signed by it; a later `up` finds them
# registered and writes nothing). All three stay in the `admin-key` volume, which
# only this job mounts; the controller's and the operator's key are then copied,
# owner-only, into the one volume each of those services mounts, so neither ever
# holds the admin's key. The agent's node key (principal node.agent-1, role
# agent) is enrolled straight into the volume only the agent mounts, as
# `runledger node enroll` does for any node (docs/security.md: a key per node). Without signatures the controller would take any
# operator's request for any principal's (docs/security.md).
set -eu
: "${RUNLEDGER_BOOTSTRAP:?}" "${RUNLEDGER_CREDENTIALS:?}"
umask 077
python -c 'import sys
from pathlib import Path
from runledger.stack.keys import ensure_keys
ensure_keys(Path(sys.argv[1]), sys.argv[2], sys.argv[3])' \
    /keys/admin "$RUNLEDGER_BOOTSTRAP" "$RUNLEDGER_CREDENTIALS"
cp /keys/admin/keys/controller.key /keys/controller/controller.key
cp /keys/admin/keys/operator.key /keys/operator/operator.key
runledger node enroll agent-1 --admin-key /keys/admin/keys/admin.key \
    --key /keys/agent/node.agent-1.key
