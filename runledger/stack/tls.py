"""TLS for a local stack (``runledger stack up --tls``): a private CA and a broker certificate.

Files in ``<data dir>/tls/`` (directory 0700): ``ca.pem`` (the CA's
certificate, which clients trust through ``ssl.ca.location``), ``ca.key`` and
``broker.pem`` (the broker's PKCS#8 private key followed by its certificate
chain, Kafka's PEM keystore), the keys owner-only. The broker certificate
names ``127.0.0.1`` and ``localhost``, the only addresses a local stack
listens on, so clients verify the host name as well as the chain (compose.yaml's
``tls`` job names its broker ``kafka`` instead, scripts/compose-tls.sh). Existing
files are kept: a restart serves the same certificate.

For a real cluster, use your own CA and put ``security.protocol=SASL_SSL``
and ``ssl.ca.location`` in the credentials files (docs/operating.md, Running on a real
Kafka cluster).

Tested in tests/runledger/stack/test_tls.py.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from runledger.stack.credentials import write_private
from runledger.stack.layout import HOST

DIR = "tls"
VALID_DAYS = 825  # what browsers accept for a leaf; a local stack lives far shorter
# The only addresses a local stack listens on.
LOCAL_HOSTS = (HOST, "localhost")


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: Path
    keystore: Path


def tls_files(data_dir: Path) -> TlsFiles:
    folder = data_dir / DIR
    return TlsFiles(folder / "ca.pem", folder / "broker.pem")


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "runledger local stack"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _ca(now: dt.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("runledger local CA"))
            .issuer_name(_name("runledger local CA")).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _leaf(ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, now: dt.datetime,
          hosts: tuple[str, ...]) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    names = x509.SubjectAlternativeName([_alt_name(h) for h in hosts])
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(names, critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def ensure_tls(data_dir: Path, hosts: tuple[str, ...] = LOCAL_HOSTS) -> TlsFiles:
    """The stack's CA and broker keystore, made once, the broker's certificate naming
    ``hosts`` (IP addresses or DNS names; compose.yaml's broker is ``kafka``)."""
    if not hosts:
        raise ValueError("a broker certificate names at least one host")
    files = tls_files(data_dir)
    if files.ca.exists() and files.keystore.exists():
        return files
    now = dt.datetime.now(dt.UTC)
    ca_key, ca = _ca(now)
    key, cert = _leaf(ca_key, ca, now, hosts)
    pem = serialization.Encoding.PEM
    write_private(files.ca.parent / "ca.key", _pem_key(ca_key).decode(), overwrite=True)
    write_private(files.keystore, (_pem_key(key) + cert.public_bytes(pem)
                                   + ca.public_bytes(pem)).decode(), overwrite=True)
    # Public, but written the same way: nobody else may swap the anchor clients trust.
    write_private(files.ca, ca.public_bytes(pem).decode(), overwrite=True)
    return files
