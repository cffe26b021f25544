"""Where the demo points a person: the live view it starts, and the epilogue's next steps.

The live view (``runledger ui``) runs as one more service beside the controller,
projector and agent, on ``--ui-port`` (8265 by default; when that port is taken,
any free one, and the demo says which). The demo prints its URL before the run
is submitted and the run's own page right after, so the page can be watched
while the run trains, is killed and recovers; it stops with the other services.

Tested in tests/e2e/test_demo.py and tests/e2e/test_ui_browser.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runledger.demo.procs import DemoError, Services, tail
from runledger.ui.serve import port_free

Say = Callable[[str], None]
UI_START_S = 60.0


def start_ui(services: Services, port: int, db: Path, log: Path,
             env: Mapping[str, str]) -> str:
    """Start ``runledger ui`` as a service and return its URL once it listens."""
    chosen = port if port_free(port) else 0
    service = services.start("ui", ["ui", "--port", str(chosen), "--db", str(db), "--json"],
                             log, env=env)
    deadline = time.monotonic() + UI_START_S
    while time.monotonic() < deadline:
        url = _url_in(log)
        if url is not None:
            return url
        if service.proc.poll() is not None:
            break
        time.sleep(0.2)
    raise DemoError(f"the live view (runledger ui) did not start; its log: {log}\n{tail(log)}")


def _url_in(log: Path) -> str | None:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("{"):
            try:
                doc: Any = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("url"), str):
                return str(doc["url"])
    return None


def epilogue(summary: Any, root: Path, stack_dir: Path, say: Say, kept: bool) -> None:
    """The demo's last lines: how it went, where its files are, how to look further."""
    say("")
    if summary.ok:
        gens = len(summary.generations)
        say(f"demo succeeded: run {summary.run_id} {summary.state} at step {summary.final_step}"
            f" after {gens - 1} recovery(ies), in {summary.timings_s.get('total')} s")
    else:
        say(f"demo FAILED: {summary.error}")
    say(f"workdir  {root}")
    say(f"report   {summary.report or 'not written'}")
    say(f"summary  {root / 'summary.json'}")
    if summary.run_id is None:
        return
    # How to look further: the projection needs no broker, status and events do.
    creds = (f" RUNLEDGER_CREDENTIALS={stack_dir}/credentials/operator.properties"
             if summary.stack_started else "")
    say(f"explore  export RUNLEDGER_HOME={root} RUNLEDGER_BOOTSTRAP={summary.bootstrap}"
        f"{creds}")
    if summary.stack_started and not kept:
        say(f"         runledger stack up --data-dir {stack_dir}   # the broker, again")
    say(f"         runledger ui --db {summary.db}   # the live view, again")
    say(f"         runledger query audit {summary.run_id}; runledger events dump --topic"
        f" runledger.runs --run {summary.run_id}")


__all__ = ["epilogue", "start_ui"]
