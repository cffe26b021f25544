"""The order planned ahead, in a process of its own, for the loader that hands it out.

Used when the planner's loop is not compiled (an install without ``native/``, such
as the container image): the compiled loop plans a batch in about 0.4 ms on the
loader's own thread, where a child's pipe and pickles would cost more.

Planning (which source next, which record, what the transforms keep, packing:
``dataplane.order``) is pure Python, a drawn record at a time, and it held the
same GIL as row assembly, so the loader got 0.38-0.6 of a bare DataLoader
(bench/dataplane.py). Here a child process runs the very same
:class:`~dataplane.order.Planner` from the state after the batch the loader just
planned, and streams each next batch's plan back; the loader's own thread then
only receives plans and assembles rows. Every batch is still planned by one
``Planner`` from one state, sequentially, so the order (``rl-feistel-v1``), the
mixing bound and the resume contract are untouched: the child's batch ``k`` is
bit for bit what the loader's own planner would give. On this 2-core machine it
gives 1.19x (9.7 against 8.1 M tokens/s, the child sharing the cores with the
assembly threads); the child plans at most at one core's pure-Python rate (about
19 M tokens/s of 2,048-token rows), so with a core of its own that is the bound,
and a compiled planner is what goes past it.

The loader asks for a batch by the state it starts from. When that is the state
the child's next plan starts from, the child's plan is the answer; otherwise (the
first batches, a ``load_state_dict``, a different size) the batch is planned here,
so a seek never waits on a process start. A child is started, from the state
after the batch just planned, once :data:`START_AFTER` batches in a row were
planned here: a start costs about as much as planning that many batches, so a
loader closed after a few batches (a test, a probe, a short evaluation, a rank
that is stopped and resumed) never starts one. An error the planner raises in
the child (a source exhausted, a data fault reading record lengths) is raised
here at the same batch, as the same class with the same message and attributes.
The child is ``python -m dataplane.planahead``, a fresh interpreter: it never
runs the training script again (as a spawned ``multiprocessing`` child would
without a ``__main__`` guard) and never forks a threaded process. It ends when
the loader closes it, and on its own when the loader's process is gone (its
next write fails).

Tested in tests/dataplane/test_planahead.py; measured in bench/dataplane.py.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import subprocess
import sys
from typing import IO, Any

from dataplane.errors import DataPlaneError
from dataplane.order import OrderState, Planner, Sequence_
from dataplane.store import ObjectStore, Verify

Planned = tuple[list[Sequence_], OrderState]
# Batches planned in a row on the loader's thread before a child takes over. A child's
# start (an interpreter, numpy, fsspec, pydantic, the manifest) takes 0.3-0.8 s of CPU
# here, and planning a global batch of 16 x 2048 tokens about 9 ms: 32 batches is
# where the child starts to pay. With a start after every 8, tests/dataplane's
# thousand stopped and resumed loaders took 235 s instead of 8.
START_AFTER = 32


class PlanAhead:
    """``Planner.plan_batch`` answered, when it can be, by a child planning ahead."""

    def __init__(self, planner: Planner, size: int, *, verify: Verify = "digest",
                 retries: int = 3, start_after: int = START_AFTER) -> None:
        self.planner = planner
        self.size = size
        self.start_after = start_after
        self._store = (verify, retries)
        self._here = 0  # batches planned here in a row, each after the one before
        self._after: OrderState | None = None  # the state the last one planned here ended in
        self._child: subprocess.Popen[bytes] | None = None
        self._next: OrderState | None = None  # the state the child's next plan starts from
        self.received = 0  # batches the child planned (what the loader's thread did not)

    def plan_batch(self, st: OrderState, size: int) -> Planned | None:
        if self._child is not None and size == self.size and st == self._next:
            return self._receive()
        self.close()
        planned = self.planner.plan_batch(st, size)
        self._here = self._here + 1 if st == self._after and size == self.size else 1
        self._after = planned[1] if planned is not None else None
        if planned is not None and size == self.size and self._here >= self.start_after:
            self._start(planned[1])
        return planned

    def close(self) -> None:
        child, self._child, self._next = self._child, None, None
        if child is None:
            return
        child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()

    def _start(self, st: OrderState) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        child = subprocess.Popen([sys.executable, "-m", "dataplane.planahead"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        assert child.stdin is not None
        setup = (self.planner.manifest, self.planner.seed, self.planner.compiled, self.size,
                 *self._store, st)
        try:
            pickle.dump(setup, child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            child.stdin.close()
        except BrokenPipeError:
            pass  # it died at once: the first receive says so
        self._child, self._next = child, st

    def _receive(self) -> Planned | None:
        child = self._child
        assert child is not None and child.stdout is not None
        try:
            message = pickle.load(child.stdout)
        except (EOFError, pickle.UnpicklingError) as exc:
            code = child.poll()
            self.close()
            raise DataPlaneError(
                f"the loader's planning process ended without a plan (exit code {code}, "
                f"{type(exc).__name__}); its error, if any, is in the output above") from None
        kind = message[0]
        if kind == "plan":
            _, sequences, order = message
            self._next = order
            self.received += 1
            return sequences, order
        self.close()
        if kind == "end":
            return None
        raise _rebuilt(*message[1:])


def _rebuilt(module: str, name: str, text: str, attrs: dict[str, Any]) -> BaseException:
    """The planner's error as it was raised in the child: its class, message, attributes."""
    cls = getattr(importlib.import_module(module), name, None) if module.startswith(
        "dataplane.") else None
    if not (isinstance(cls, type) and issubclass(cls, DataPlaneError)):
        return DataPlaneError(f"the loader's planning process failed: {name}: {text}")
    exc = cls.__new__(cls)
    Exception.__init__(exc, text)
    exc.__dict__.update(attrs)
    return exc


def _serve(source: IO[bytes], out: IO[bytes]) -> None:
    """The child: plan batch after batch from the state it is given, sending each."""
    manifest, seed, compiled, size, verify, retries, st = pickle.load(source)
    store = ObjectStore(manifest, verify=verify, retries=retries)
    planner = Planner(manifest, seed, store.length, compiled=compiled,
                      blocks=store.lengths_block)
    while True:
        try:
            planned = planner.plan_batch(st, size)
        except Exception as exc:
            try:
                attrs = pickle.loads(pickle.dumps(vars(exc)))
            except Exception:
                attrs = {}
            message: tuple[Any, ...] = ("error", type(exc).__module__, type(exc).__qualname__,
                                        str(exc), attrs)
            pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            return
        if planned is None:
            pickle.dump(("end",), out)
            out.flush()
            return
        pickle.dump(("plan", *planned), out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()  # blocks while the loader is a full pipe behind: planning waits
        st = planned[1]


def main() -> None:
    # The plans go to a private copy of stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    with contextlib.suppress(BrokenPipeError):  # the loader closed it, or its process is gone
        _serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
