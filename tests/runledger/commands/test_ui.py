"""``runledger ui`` as the README starts it: a whole process, against the session's broker.

Its refusals come before any broker is asked; on another address than loopback
it serves HTTPS only, and takes a request only with a Kafka principal's own user
name and password, checked by a login to the cluster (the session's principal
is the stack's admin, whose key is on ``runledger.keys``).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from events.kafka.connection import ENV_CREDENTIALS, parse_credentials
from tests.runledger.ui.test_server import _certificate

CLI = [sys.executable, "-m", "runledger.cli", "ui"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_another_address_without_tls_is_refused_before_anything_runs() -> None:
    done = run("--host", "0.0.0.0", "--bootstrap", "127.0.0.1:1")
    assert done.returncode == 2
    assert "--tls-cert FILE and --tls-key FILE" in done.stderr
    assert "no Kafka broker" not in done.stderr  # refused before asking one


def test_a_certificate_needs_its_key(tmp_path: Path) -> None:
    cert, _ = _certificate(tmp_path)
    done = run("--tls-cert", str(cert), "--bootstrap", "127.0.0.1:1")
    assert done.returncode == 2 and "--tls-cert and --tls-key go together" in done.stderr
    done = run("--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(tmp_path / "k"))
    assert done.returncode == 2 and "none.pem: no such file" in done.stderr


def _get(url: str, trust: ssl.SSLContext, auth: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=60, context=trust) as res:
            return int(res.status)
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.kafka
def test_https_with_an_operators_kafka_login(bootstrap: str, tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    settings = parse_credentials(Path(os.environ[ENV_CREDENTIALS]).read_text(), "session")
    user, password = settings["sasl.username"], settings["sasl.password"]
    proc = subprocess.Popen([*CLI, "--host", "0.0.0.0", "--port", "0", "--json",
                             "--tls-cert", str(cert), "--tls-key", str(key),
                             "--db", str(tmp_path / "none.duckdb")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        url = json.loads(line)["url"]
        assert url.startswith("https://0.0.0.0:")
        local = url.replace("0.0.0.0", "localhost") + "/api/runs"
        trust = ssl.create_default_context(cafile=str(cert))
        assert _get(local, trust, None) == 401
        wrong = "Basic " + base64.b64encode(f"{user}:{password}-no".encode()).decode()
        assert _get(local, trust, wrong) == 401
        right = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        assert _get(local, trust, right) == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
