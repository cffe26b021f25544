#!/bin/sh
# compose.yaml's `tls` job, once, as root: the stack's own CA and a broker
# certificate for the names clients reach the broker by (`kafka` inside the
# compose network, `localhost` through the published port), made as `runledger
# stack up --tls` makes a local stack's (runledger.stack.tls: EC P-256, the
# broker's PKCS#8 key and chain in one PEM keystore). The keystore and the CA's
# key go into the `broker-tls` volume, which only this job and the broker
# mount, owner-only and owned by the broker image's user (KAFKA_UID: apache/
# kafka runs as appuser, uid 1000), since the broker must read its key; the
# CA's certificate, which every client trusts (ssl.ca.location), is copied to
# `tls-ca` for anyone to read. A later `up` finds the files and keeps them, so
# clients keep trusting the same CA.
set -eu
: "${KAFKA_UID:?compose sets KAFKA_UID}"
BROKER_TLS="${BROKER_TLS:-/broker-tls}"
TLS_CA="${TLS_CA:-/tls-ca}"
umask 077
python -c 'import sys
from pathlib import Path
from runledger.stack.tls import ensure_tls
ensure_tls(Path(sys.argv[1]), tuple(sys.argv[2:]))' "$BROKER_TLS" kafka localhost
chown -R "$KAFKA_UID" "$BROKER_TLS/tls"
cp "$BROKER_TLS/tls/ca.pem" "$TLS_CA/ca.pem.new"
chmod 0644 "$TLS_CA/ca.pem.new"
mv "$TLS_CA/ca.pem.new" "$TLS_CA/ca.pem"
