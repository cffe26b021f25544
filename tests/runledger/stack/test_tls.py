"""``runledger stack up --tls``: the stack's own CA, a verified broker certificate, clients
that trust it through their credentials file and clients that do not."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from runledger.stack import Stack
from runledger.stack.tls import ensure_tls


def test_the_broker_certificate_names_loopback_and_chains_to_the_ca(tmp_path: Path) -> None:
    files = ensure_tls(tmp_path)
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    chain = x509.load_pem_x509_certificates(files.keystore.read_bytes())
    leaf = chain[0]
    assert leaf.issuer == ca.subject and chain[1] == ca
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    public.verify(leaf.signature, leaf.tbs_certificate_bytes,
                  ec.ECDSA(leaf.signature_hash_algorithm))  # type: ignore[arg-type]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    for path in (files.keystore, tmp_path / "tls" / "ca.key"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in files.keystore.read_bytes()
    again = ensure_tls(tmp_path)  # kept: a restart serves the same certificate
    assert again.ca.read_bytes() == files.ca.read_bytes()


def runledger(*args: str, bootstrap: str, credentials: Path,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap,
           "RUNLEDGER_CREDENTIALS": str(credentials), "RUNLEDGER_RETRY_S": "3"}
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.slow
@pytest.mark.kafka
def test_a_tls_stack_serves_clients_that_trust_its_ca_and_only_them(tmp_path: Path) -> None:
    data = tmp_path / "stack"
    up = subprocess.run([sys.executable, "-m", "runledger.cli", "stack", "up", "--tls",
                         "--data-dir", str(data), "--json"], capture_output=True, text=True,
                        timeout=240, check=False, env={k: v for k, v in os.environ.items()
                                                       if k != "RUNLEDGER_BOOTSTRAP"})
    try:
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        bootstrap, creds = info["bootstrap"], data / "credentials"
        operator = creds / "operator.properties"
        text = operator.read_text()
        assert "security.protocol=SASL_SSL" in text
        assert f"ssl.ca.location={data / 'tls' / 'ca.pem'}" in text
        assert runledger("runs", bootstrap=bootstrap, credentials=operator).returncode == 0

        # A principal the admin adds reaches the cluster the same way (TLS, the CA).
        added = runledger("principal", "add", "carol", "--role", "operator",
                          bootstrap=bootstrap, credentials=creds / "admin.properties",
                          cwd=tmp_path)
        assert added.returncode == 0, added.stderr
        assert "ssl.ca.location=" in (tmp_path / "carol.properties").read_text()
        assert runledger("runs", bootstrap=bootstrap,
                         credentials=tmp_path / "carol.properties").returncode == 0

        untrusting = tmp_path / "no-ca.properties"
        untrusting.write_text("".join(line + "\n" for line in text.splitlines()
                                      if not line.startswith("ssl.ca.location")))
        untrusting.chmod(0o600)
        done = runledger("runs", bootstrap=bootstrap, credentials=untrusting)
        assert done.returncode == 1
        assert "the TLS handshake with" in done.stderr and "certificate verify failed" in \
            done.stderr and "ssl.ca.location" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1

        plaintext = tmp_path / "plain.properties"
        plaintext.write_text(text.replace("SASL_SSL", "SASL_PLAINTEXT"))
        plaintext.chmod(0o600)
        assert runledger("runs", bootstrap=bootstrap, credentials=plaintext).returncode == 1
    finally:
        Stack(data).down(purge=True)
