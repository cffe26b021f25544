"""Start the live view: its feeds, its gate and its server, until Ctrl-C or SIGTERM.

Tested in tests/runledger/ui/test_server.py and tests/e2e/test_ui_browser.py.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runledger.errors import UsageError
from runledger.ui.api import LiveView, log_reader, node_rows, status_reader
from runledger.ui.auth import Gate, check_listen, is_loopback, kafka_login, key_roles
from runledger.ui.feeds import Feed, Projection
from runledger.ui.server import LiveServer, tls_context

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8265
POLL_S = 2.0
NODES_EVERY_S = 5.0


@dataclass(frozen=True, slots=True)
class UiConfig:
    """What ``runledger ui`` was asked for."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    db: Path = Path("projection.duckdb")
    tls_cert: Path | None = None
    tls_key: Path | None = None
    poll_s: float = POLL_S
    nodes_every_s: float = NODES_EVERY_S
    retry_s: float = 30.0


def port_free(port: int, host: str = DEFAULT_HOST) -> bool:
    """Whether ``port`` can be listened on now (0 always can)."""
    if port == 0:
        return True
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def build(cfg: UiConfig, address: str) -> tuple[LiveServer, Callable[[], None]]:
    """The server, bound and ready to serve, and what stops its feeds."""
    check_listen(cfg.host, cfg.tls_cert is not None)
    tls = (tls_context(cfg.tls_cert, cfg.tls_key)
           if cfg.tls_cert is not None and cfg.tls_key is not None else None)
    status = Feed("status", status_reader(address), cfg.poll_s)
    nodes = Feed("nodes", node_rows(address), cfg.nodes_every_s)
    projection = Projection(cfg.db)
    view = LiveView(status, nodes, projection, log_reader(address, cfg.retry_s))
    gate = (Gate(None, None) if is_loopback(cfg.host)
            else Gate(kafka_login(address), key_roles(address)))
    try:
        server = LiveServer((cfg.host, cfg.port), view, gate, tls)
    except OSError as exc:
        raise UsageError(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc};"
                         " pass another --port (0 picks a free one)") from None
    status.start()
    nodes.start()

    def stop() -> None:
        status.close()
        nodes.close()
        projection.close()

    return server, stop


def serve(cfg: UiConfig, address: str, announce: Callable[[str], None]) -> None:
    """Serve until SIGINT or SIGTERM; ``announce`` is told the URL once it listens."""
    server, stop_feeds = build(cfg, address)
    done = threading.Event()

    def shutdown(*_: object) -> None:
        if not done.is_set():
            done.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, shutdown)
    announce(server.url)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        stop_feeds()


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "UiConfig", "build", "port_free", "serve"]
