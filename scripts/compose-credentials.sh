#!/bin/sh
# compose.yaml's services: write this container's credentials file from ROLE
# and PASSWORD (SASL/PLAIN, as compose's broker accepts), owner-only, where
# RUNLEDGER_CREDENTIALS points. The password never reaches a log or the image.
set -eu
: "${ROLE:?compose sets ROLE}" "${PASSWORD:?compose sets PASSWORD}" "${RUNLEDGER_CREDENTIALS:?}"
umask 077
printf '%s\n' "security.protocol=SASL_PLAINTEXT" "sasl.mechanism=PLAIN" \
    "sasl.username=$ROLE" "sasl.password=$PASSWORD" > "$RUNLEDGER_CREDENTIALS"
