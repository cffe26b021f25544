"""Ctrl-C that always ends a command that follows the log (``events tail``, ``logs
--follow``, ``status --watch``).

Ctrl-C raises ``KeyboardInterrupt`` as usual, and ``runledger.cli`` turns it
into ``runledger: interrupted`` and exit 130. But a ``KeyboardInterrupt``
raised while librdkafka runs one of its Python callbacks inside a poll can be
swallowed there, and a tail then reads on after Ctrl-C (seen on a loaded
machine). :func:`follow_ctrl_c` adds a watchdog to these commands, which hold
nothing to clean up: still running ``GRACE_S`` after Ctrl-C, the command says
so and exits 130 at once. Commands that clean up on Ctrl-C (the demo, the
services) do not use it.

Tested in tests/runledger/test_cli.py.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType

GRACE_S = 5.0


def follow_ctrl_c(grace_s: float = GRACE_S) -> None:
    """From now on Ctrl-C raises ``KeyboardInterrupt`` and, if that is lost, exits 130
    after ``grace_s``. Only from the main thread (where signal handlers live)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=_exit_after, args=(grace_s,), daemon=True).start()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)


def _exit_after(grace_s: float) -> None:
    time.sleep(grace_s)
    sys.stderr.write("runledger: interrupted\n")
    sys.stderr.flush()
    os._exit(130)  # the interrupt was swallowed on its way up: end here, as Ctrl-C asked
