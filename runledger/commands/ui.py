"""``runledger ui``: serve the live view of the runs, the nodes and the workers' output.

Tested in tests/runledger/commands/test_ui.py, tests/runledger/ui/test_server.py and
tests/e2e/test_ui_browser.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from runledger import config
from runledger.config import Bootstrap, db_option

Host = Annotated[str, typer.Option(
    "--host", metavar="H", help="The address to listen on. Loopback (the default) is open to"
    " anyone on this machine; any other address needs --tls-cert and --tls-key, and every"
    " request an operator's Kafka user name and password (HTTP Basic).")]
Port = Annotated[int | None, typer.Option(
    "--port", metavar="P", min=0, max=65535,
    help="The port (0: any free one). Without it, 8265, or any free one when 8265 is taken;"
         " the URL it prints says which.")]
UiDb = Annotated[Path | None, db_option(
    "The projection whose snapshot the run pages read (default"
    " $RUNLEDGER_HOME/projection.duckdb).")]
TlsCert = Annotated[Path | None, typer.Option(
    "--tls-cert", metavar="FILE", help="PEM certificate chain to serve HTTPS with.")]
TlsKey = Annotated[Path | None, typer.Option(
    "--tls-key", metavar="FILE", help="PEM private key of --tls-cert.")]
UiJson = Annotated[bool, typer.Option(
    "--json", help="Print {url} as one JSON line once listening, instead of a sentence.")]


def register(app: typer.Typer) -> None:
    app.command()(ui)


def ui(host: Host = "127.0.0.1", port: Port = None, db: UiDb = None,
       bootstrap: Bootstrap = None, tls_cert: TlsCert = None, tls_key: TlsKey = None,
       as_json: UiJson = False) -> None:
    """Serve a live, read-only web view: runs, a run's progress, curves, failures and
    recovery, nodes, and a worker's output, updated every few seconds."""
    from runledger.errors import UsageError
    from runledger.ui.auth import check_listen
    from runledger.ui.serve import DEFAULT_PORT, UiConfig, port_free, serve

    if (tls_cert is None) != (tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together: give both, or neither")
    for given in (tls_cert, tls_key):
        if given is not None and not given.is_file():
            raise UsageError(f"{given}: no such file (a PEM file is expected)")
    check_listen(host, tls_cert is not None)  # before any broker is asked anything
    if port is None:
        port = DEFAULT_PORT if port_free(DEFAULT_PORT, host) else 0
        if port == 0:
            typer.echo(f"port {DEFAULT_PORT} is taken: serving on a free one", err=True)
    address = config.connect(bootstrap)
    cfg = UiConfig(host=host, port=port, db=db or config.default_db(), tls_cert=tls_cert,
                   tls_key=tls_key, retry_s=config.retry_s())

    def announce(url: str) -> None:
        if as_json:
            typer.echo(json.dumps({"url": url}))
        else:
            typer.echo(f"runledger live view: {url}  (read-only; Ctrl-C stops it)")

    serve(cfg, address, announce)
