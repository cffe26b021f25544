"""Serving a Prometheus collector over HTTP: ``runledger controller|project|agent --metrics``.

The collectors live with what they measure (``controller.metrics``,
``projectors.metrics``, ``agent.metrics``), which may not import each other;
serving them is the command line's job, so the one HTTP server they all use
lives here. Each server has a private registry (never the process-wide default
one) and runs in a daemon thread; port 0 binds an ephemeral port, and ``url``
reports the one bound.

Tested in tests/controller/test_metrics.py, tests/projectors/test_metrics.py and
tests/agent/test_metrics.py.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer

import typer
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import Collector, CollectorRegistry

from runledger.errors import UsageError

DEFAULT_HOST = "127.0.0.1"  # loopback unless asked: run ids and principals are not public


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` or ``PORT``; the host defaults to loopback."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or int(port) > 65_535:
        raise ValueError(f"metrics address {text!r}: expected HOST:PORT with a port 0-65535")
    return host, int(port)


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """One collector on its own registry, served from a daemon thread.

    ``on_close`` releases what the collector holds (the projector's collector
    has a DuckDB cursor and a consumer), after the server stops answering.
    """

    def __init__(self, collector: Collector, host: str = DEFAULT_HOST, port: int = 0, *,
                 on_close: Callable[[], None] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(collector)
        self._on_close = on_close
        server = _V6Server if ":" in host else ThreadingHTTPServer
        self._httpd = server((host, port), MetricsHandler.factory(self.registry))
        self._httpd.daemon_threads = True  # a hung scraper never blocks shutdown
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="runledger-metrics", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
        if self._on_close is not None:
            self._on_close()


def serve(collector: Collector, address: str, *,
          on_close: Callable[[], None] | None = None) -> MetricsServer:
    """Start serving ``collector`` at ``address`` (``HOST:PORT``); ``on_close`` also runs
    when the server cannot start, so nothing the collector holds leaks."""
    try:
        host, port = parse_address(address)
        return MetricsServer(collector, host, port, on_close=on_close)
    except (ValueError, OSError):
        if on_close is not None:
            on_close()
        raise


def serve_metrics(collector: Collector, address: str, *,
                  on_close: Callable[[], None] | None = None) -> MetricsServer:
    """``serve`` for a command: an address it cannot serve at is a
    :class:`~runledger.errors.UsageError` naming ``--metrics``; the bound URL is
    printed on stderr (with port 0 only this line tells the port)."""
    try:
        server = serve(collector, address, on_close=on_close)
    except (ValueError, OSError) as exc:
        raise UsageError(f"--metrics: {exc}") from None
    typer.echo(f"metrics at {server.url}", err=True)
    return server
