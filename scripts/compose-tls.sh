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
#
# It also makes the live view's (`runledger ui`) server certificate, signed by
# the same CA, for the names a browser reaches it by (`localhost` and
# 127.0.0.1 through the published port, `ui` inside the compose network):
# `ui.pem` (the certificate and the CA's, a chain) and `ui.key` (PKCS#8,
# owner-only), owned by the runledger image's user (UI_UID: 10001), in the
# `ui-tls` volume that only this job and the `ui` service mount. It is kept
# while the CA that signed it is the current one, and made again otherwise.
set -eu
: "${KAFKA_UID:?compose sets KAFKA_UID}" "${UI_UID:?compose sets UI_UID}"
BROKER_TLS="${BROKER_TLS:-/broker-tls}"
TLS_CA="${TLS_CA:-/tls-ca}"
UI_TLS="${UI_TLS:-/ui-tls}"
umask 077
python -c 'import sys
from pathlib import Path
from runledger.stack.tls import ensure_tls
ensure_tls(Path(sys.argv[1]), tuple(sys.argv[2:]))' "$BROKER_TLS" kafka localhost
chown -R "$KAFKA_UID" "$BROKER_TLS/tls"
cp "$BROKER_TLS/tls/ca.pem" "$TLS_CA/ca.pem.new"
chmod 0644 "$TLS_CA/ca.pem.new"
mv "$TLS_CA/ca.pem.new" "$TLS_CA/ca.pem"
python -c 'import datetime as dt, os, sys
from pathlib import Path
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from runledger.stack.tls import _leaf, _pem_key
tls, out, hosts = Path(sys.argv[1]), Path(sys.argv[2]), tuple(sys.argv[3:])
ca = x509.load_pem_x509_certificate((tls / "ca.pem").read_bytes())
cert_file, key_file = out / "ui.pem", out / "ui.key"
if cert_file.exists() and key_file.exists():
    try:
        x509.load_pem_x509_certificates(cert_file.read_bytes())[0].verify_directly_issued_by(ca)
        sys.exit(0)
    except (ValueError, TypeError, InvalidSignature):
        pass  # another CA signed it: make it again
ca_key = serialization.load_pem_private_key((tls / "ca.key").read_bytes(), None)
key, cert = _leaf(ca_key, ca, dt.datetime.now(dt.UTC), hosts)
pem = serialization.Encoding.PEM
for path, data in ((key_file, _pem_key(key)), (cert_file, cert.public_bytes(pem) + ca.public_bytes(pem))):
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.replace(new, path)' "$BROKER_TLS/tls" "$UI_TLS" localhost ui 127.0.0.1
chown "$UI_UID" "$UI_TLS/ui.pem" "$UI_TLS/ui.key"
chmod 0600 "$UI_TLS/ui.key"
chmod 0644 "$UI_TLS/ui.pem"
