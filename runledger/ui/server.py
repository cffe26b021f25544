"""The live view's HTTP server: the routes, read-only, over :class:`runledger.ui.api.LiveView`.

Standard library only (``http.server``, one thread per request). Pages are one
shell (``static/index.html``) whose script draws each route from the JSON
under ``/api/``, polling every few seconds; nothing is loaded from elsewhere
(the Content-Security-Policy says ``'self'`` only). Only GET and HEAD are
answered: the view changes nothing, so there is nothing to forge. Every
request passes the gate (``runledger.ui.auth``) first.

Routes: ``/``, ``/runs/RUN``, ``/runs/RUN/logs``, ``/nodes`` (the shell);
``/runbooks`` (``docs/runbooks.md`` when it is beside the package);
``/static/*``; ``/api/health``, ``/api/runs``, ``/api/runs/RUN``,
``/api/runs/RUN/sections``, ``/api/runs/RUN/log``, ``/api/nodes``.

Tested in tests/runledger/ui/test_server.py.
"""

from __future__ import annotations

import gzip
import html
import json
import logging
import re
import ssl
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from runledger.ui.api import LiveView, NotFound
from runledger.ui.auth import REALM, Gate

LOG = logging.getLogger("runledger.ui")
SHELL_ROUTES = re.compile(r"^/(?:runs/[^/]+(?:/logs)?|nodes)?/?$")
_RUN = re.compile(r"^/api/runs/([^/]+)(/sections|/log)?$")
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml"}
# Scripts and styles from this server only; no frame may hold the page; nothing leaks
# the run ids in a Referer.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self' "
                               "'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
MAX_TAIL = 5_000


def _static(name: str) -> bytes:
    return resources.files("runledger.ui").joinpath("static", name).read_bytes()


def report_css() -> bytes:
    from queries.report_html import CSS
    return CSS.encode()


def runbooks_page(path: Path | None = None) -> bytes | None:
    """``docs/runbooks.md`` as a page with an anchor per ``##`` heading, or None."""
    src = path or Path(__file__).resolve().parents[2] / "docs" / "runbooks.md"
    try:
        text = src.read_text(encoding="utf-8")
    except OSError:
        return None
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>runledger'
             ' runbooks</title><link rel="stylesheet" href="/static/app.css"></head><body>'
             '<main class="runbooks"><p><a href="/">runs</a></p>']
    block: list[str] = []

    def flush() -> None:
        if block:
            parts.append(f"<pre>{html.escape(chr(10).join(block).strip())}</pre>")
            block.clear()

    for line in text.splitlines():
        if line.startswith("## ") or line.startswith("# "):
            flush()
            title = line.lstrip("#").strip()
            level = 1 if line.startswith("# ") else 2
            parts.append(f'<h{level} id="{html.escape(title)}">{html.escape(title)}</h{level}>')
        else:
            block.append(line)
    flush()
    parts.append("</main></body></html>")
    return "".join(parts).encode()


class Handler(BaseHTTPRequestHandler):
    server: LiveServer
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: with Nagle on, a kept-alive answer waits ~40 ms.
    disable_nagle_algorithm = True
    server_version = "runledger-ui"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("%s %s", self.address_string(), format % args)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _refuse_write(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "the live view is read-only"},
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse_write

    def _serve(self, head: bool) -> None:
        verdict = self.server.gate.check(self.headers.get("Authorization"))
        if verdict.principal is None:
            LOG.info("refused %s: %s", self.address_string(), verdict.reason)
            self._send(HTTPStatus.UNAUTHORIZED, {"error": verdict.reason},
                       extra={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})
            return
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            status, body, ctype = self._route(url.path, query)
        except Exception:  # a bug: the page says so, the server stays up
            LOG.exception("GET %s", self.path)
            status, body, ctype = self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {
                "error": "the live view failed on this request; its log has the traceback"})
        self._write(status, body, ctype, head=head)

    def _route(self, path: str, query: Mapping[str, str]) -> tuple[int, bytes, str]:
        view = self.server.view
        if path.startswith("/static/"):
            return self._asset(path.removeprefix("/static/"))
        if path == "/runbooks":
            page = runbooks_page()
            if page is None:
                return self._json(HTTPStatus.NOT_FOUND, {"error": "docs/runbooks.md is not"
                                  " installed beside this package; see the repository's copy"})
            return HTTPStatus.OK, page, _TYPES[".html"]
        if SHELL_ROUTES.match(path):
            return HTTPStatus.OK, self.server.shell, _TYPES[".html"]
        if path == "/api/health":
            return self._json(HTTPStatus.OK, view.health())
        if path == "/api/runs":
            return self._json(HTTPStatus.OK, view.runs())
        if path == "/api/nodes":
            return self._json(HTTPStatus.OK, view.nodes())
        m = _RUN.match(path)
        if m is None:
            return self._json(HTTPStatus.NOT_FOUND, {"error": f"no page {path!r}"})
        run_id, what = unquote(m[1]), m[2]
        if what == "/sections":
            return self._answer(view.run_sections(run_id, query.get("since")))
        if what == "/log":
            return self._log(run_id, query)
        return self._answer(view.run(run_id))

    def _log(self, run_id: str, query: Mapping[str, str]) -> tuple[int, bytes, str]:
        try:
            generation = int(query["generation"]) if query.get("generation") else None
            tail = min(int(query.get("tail") or 400), MAX_TAIL)
        except ValueError:
            return self._json(HTTPStatus.BAD_REQUEST, {
                "error": "generation and tail are whole numbers, e.g. ?generation=2&tail=200"})
        return self._json(HTTPStatus.OK, self.server.view.log(
            run_id, generation, query.get("rank") or None, max(tail, 1)))

    def _answer(self, doc: Mapping[str, Any] | NotFound) -> tuple[int, bytes, str]:
        if isinstance(doc, NotFound):
            return self._json(HTTPStatus.NOT_FOUND, {"error": doc.message})
        return self._json(HTTPStatus.OK, doc)

    def _asset(self, name: str) -> tuple[int, bytes, str]:
        if name == "report.css":
            return HTTPStatus.OK, self.server.report_css, _TYPES[".css"]
        suffix = Path(name).suffix
        if "/" in name or name.startswith(".") or suffix not in _TYPES:
            return self._json(HTTPStatus.NOT_FOUND, {"error": f"no asset {name!r}"})
        try:
            return HTTPStatus.OK, _static(name), _TYPES[suffix]
        except (FileNotFoundError, IsADirectoryError):
            return self._json(HTTPStatus.NOT_FOUND, {"error": f"no asset {name!r}"})

    @staticmethod
    def _json(status: int, doc: Mapping[str, Any]) -> tuple[int, bytes, str]:
        return status, json.dumps(doc, default=str).encode(), "application/json"

    def _send(self, status: int, doc: Mapping[str, Any],
              extra: Mapping[str, str] | None = None) -> None:
        _, body, ctype = self._json(status, doc)
        self._write(status, body, ctype, extra=extra)

    def _write(self, status: int, body: bytes, ctype: str, *, head: bool = False,
               extra: Mapping[str, str] | None = None) -> None:
        gz = "gzip" in (self.headers.get("Accept-Encoding") or "") and len(body) > 1024
        if gz:
            body = gzip.compress(body, compresslevel=5)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store" if ctype == "application/json"
                         else "no-cache")
        if gz:
            self.send_header("Content-Encoding", "gzip")
        for k, v in {**HEADERS, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)


class LiveServer(ThreadingHTTPServer):
    """The server and what every request shares: the view, the gate, the shell."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], view: LiveView, gate: Gate,
                 tls: ssl.SSLContext | None = None) -> None:
        super().__init__(address, Handler)
        self.view = view
        self.gate = gate
        self.shell = _static("index.html")
        self.report_css = report_css()
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        scheme = "https" if isinstance(self.socket, ssl.SSLSocket) else "http"
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{port}"


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for ``--tls-cert``/``--tls-key`` (TLS 1.2 at least)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
    return ctx


__all__ = ["Handler", "LiveServer", "runbooks_page", "tls_context"]
