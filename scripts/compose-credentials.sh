#!/bin/sh
# compose.yaml's services: write this container's credentials file from ROLE
# and PASSWORD (SASL/PLAIN over TLS, as compose's broker accepts, trusting the
# stack's CA that the `tls` job made: scripts/compose-tls.sh), owner-only, where
# RUNLEDGER_CREDENTIALS points. The password never reaches a log or the image.
set -eu
: "${ROLE:?compose sets ROLE}" "${PASSWORD:?compose sets PASSWORD}" "${RUNLEDGER_CREDENTIALS:?}"
umask 077
printf '%s\n' "security.protocol=SASL_SSL" "ssl.ca.location=${TLS_CA:-/tls-ca}/ca.pem" \
    "sasl.mechanism=PLAIN" "sasl.username=$ROLE" "sasl.password=$PASSWORD" \
    > "$RUNLEDGER_CREDENTIALS"
