"""Known bugs to plant in the real core, so a test can show the simulator finds them.

Each is a context manager that swaps one rule of the real code for a subtly
wrong one and puts the original back on exit:

- ``propose_after_restart``: the controller's proposal rule
  (``controller.inputs``, ``ManifestProposed``) judges a proposal as if no
  restart had been decided: it forgets, on that one path, that the decision
  revoked the generation at once (``events.fold._fenced``'s
  ``awaiting_generation``), so a proposal that arrives between the failure
  and the next generation's start commits a revoked generation's checkpoint.
  P1 catches it.
- ``revoke_keeps_cursor``: a revocation (``events.fold``'s
  ``CheckpointRevoked`` change) leaves the data cursor where it was, so the
  cursor names a checkpoint that is no longer committed. P3 catches it.

``python -m proof.sim --plant NAME`` runs the simulator with one planted.

Tested in tests/proof/test_sim.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace

from controller import inputs
from controller.emitter import Emitter
from controller.model import Tracked
from events import fold
from events.model import CheckpointRevoked, Event, ManifestProposed
from events.state import RunState


@contextmanager
def propose_after_restart() -> Iterator[None]:
    rule = inputs.RULES[ManifestProposed]
    act = rule.act
    assert act is not None

    def forgetful(em: Emitter, event: Event, before: Tracked | None) -> None:
        if before is not None and before.state.awaiting_generation:
            before = replace(before, state=replace(before.state, awaiting_generation=False))
        act(em, event, before)

    table = dict(inputs.RULES)
    table[ManifestProposed] = replace(rule, act=forgetful)
    saved, inputs.RULES = inputs.RULES, table
    try:
        yield
    finally:
        inputs.RULES = saved


@contextmanager
def revoke_keeps_cursor() -> Iterator[None]:
    advance = fold.advance

    def sticky(state: RunState, e: Event) -> RunState:
        new = advance(state, e)
        return replace(new, cursor=state.cursor) if isinstance(e, CheckpointRevoked) else new

    fold.advance = sticky
    try:
        yield
    finally:
        fold.advance = advance


PLANTS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "propose_after_restart": propose_after_restart,
    "revoke_keeps_cursor": revoke_keeps_cursor,
}
# The property each plant must break.
BREAKS = {"propose_after_restart": "P1", "revoke_keeps_cursor": "P3"}
