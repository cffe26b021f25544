"""The live view over HTTP: its routes, read-only, its headers, and its gate with TLS.

A real ``LiveServer`` on a free loopback port, over a real projection and a
summary fed by a function (no broker); requests go through ``urllib`` as a
browser's would. The TLS case uses a certificate made here, and a gate whose
login is a function, so what is checked is that the server asks before it
answers, over an encrypted connection; the login against Kafka itself is
tests/runledger/ui/test_auth.py's.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from runledger.ui import auth
from runledger.ui.api import LiveView
from runledger.ui.auth import Gate
from runledger.ui.feeds import Feed, Projection
from runledger.ui.server import LiveServer, runbooks_page, tls_context
from tests.runledger.ui.fixtures import recovered_run


def serve(server: LiveServer) -> Iterator[LiveServer]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def view_of(tmp: Path) -> LiveView:
    db = tmp / "projection.duckdb"
    _, summary = recovered_run(db)
    status = Feed("status", lambda: {summary.run_id: summary}, 60.0)
    status.once()
    nodes: Feed[list[dict[str, Any]]] = Feed("nodes", list, 60.0)
    nodes.once()
    return LiveView(status, nodes, Projection(db), lambda *a: {"error": "no logs here"})


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    yield from serve(LiveServer(("127.0.0.1", 0), view_of(tmp_path), Gate(None, None)))


def get(url: str, *, headers: dict[str, str] | None = None, method: str = "GET",
        context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as res:
            return res.status, dict(res.headers), res.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_every_page_route_serves_the_shell_and_the_shell_loads_only_its_own_assets(
        server: LiveServer) -> None:
    for path in ("/", "/nodes", "/runs/run-a", "/runs/run-a/logs?generation=1&rank=r1"):
        status, headers, body = get(server.url + path)
        assert status == 200 and b'<main id="app"' in body, path
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert headers["X-Frame-Options"] == "DENY"
    for asset in ("app.js", "app.css", "report.css"):
        status, _, body = get(f"{server.url}/static/{asset}")
        assert status == 200 and body, asset
    assert get(f"{server.url}/static/../serve.py")[0] == 404
    assert get(f"{server.url}/static/nothing.js")[0] == 404
    assert get(f"{server.url}/no/such/page")[0] == 404


def test_the_api_answers_json_and_the_run_page_its_sections(server: LiveServer) -> None:
    status, headers, body = get(server.url + "/api/runs")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert headers["Cache-Control"] == "no-store"
    doc = json.loads(body)
    assert [r["run_id"] for r in doc["runs"]] == ["run-a"]
    run = json.loads(get(server.url + "/api/runs/run-a")[2])
    assert run["run"]["generation"] == 2 and run["failures"][0]["generation"] == 1
    sections = json.loads(get(server.url + "/api/runs/run-a/sections")[2])
    assert 'id="curves"' in sections["html"]
    missing = get(server.url + "/api/runs/nope")
    assert missing[0] == 404 and "runledger runs" in json.loads(missing[2])["error"]
    bad = get(server.url + "/api/runs/run-a/log?generation=x")
    assert bad[0] == 400 and "whole numbers" in json.loads(bad[2])["error"]
    assert json.loads(get(server.url + "/api/runs/run-a/log?generation=1")[2]) == {
        "error": "no logs here"}


def test_the_view_is_read_only(server: LiveServer) -> None:
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        status, headers, body = get(server.url + "/api/runs", method=method)
        assert status == 405 and headers["Allow"] == "GET, HEAD", method
        assert "read-only" in json.loads(body)["error"]


def test_large_answers_are_compressed_for_a_browser_that_asks(server: LiveServer) -> None:
    status, headers, body = get(server.url + "/static/app.js",
                                headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert b"POLL_MS" in gzip.decompress(body)
    plain = get(server.url + "/static/app.js")
    assert "Content-Encoding" not in plain[1] and b"POLL_MS" in plain[2]


def test_the_runbooks_page_has_an_anchor_per_alert(tmp_path: Path) -> None:
    page = runbooks_page()
    assert page is not None and b'id="progress-stall"' in page
    md = tmp_path / "r.md"
    md.write_text("# T\n## a <b>\ntext & more\n")
    assert b'<h2 id="a &lt;b&gt;">' in (runbooks_page(md) or b"")
    assert runbooks_page(tmp_path / "missing.md") is None


def _certificate(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "ui.pem", tmp / "ui.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_behind_tls_every_request_needs_an_operators_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "REFUSED_PAUSE_S", 0.0)
    cert, key = _certificate(tmp_path)
    gate = Gate(lambda u, p: None if (u, p) == ("ops", "s3cret") else "bad password",
                lambda u: frozenset({"operator"}))
    server = LiveServer(("127.0.0.1", 0), view_of(tmp_path), gate, tls_context(cert, key))
    trust = ssl.create_default_context(cafile=str(cert))
    for s in serve(server):
        assert s.url.startswith("https://127.0.0.1:")
        url = s.url.replace("127.0.0.1", "localhost") + "/api/runs"
        status, headers, body = get(url, context=trust)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic realm=")
        assert json.loads(body)["error"] == "no credentials"
        wrong = "Basic " + base64.b64encode(b"ops:guess").decode()
        assert get(url, headers={"Authorization": wrong}, context=trust)[0] == 401
        for path in ("/api/runs", "/", "/static/app.js"):  # assets are behind the gate too
            right = "Basic " + base64.b64encode(b"ops:s3cret").decode()
            status, _, _ = get(url.replace("/api/runs", path),
                               headers={"Authorization": right}, context=trust)
            assert status == 200, path
