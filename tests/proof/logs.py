"""Small logs for the truth's tests: a header, and a run submitted, admitted and started."""

from __future__ import annotations

from events.model import GenerationStarted, Header, Member, RunAdmitted, RunSubmitted
from events.topics import RUNS
from proof import truth
from proof.world import NODES, RUN, World, plan

GANG = (Member("r0", "n1", 0), Member("r1", "n2", 0))


def h(event_id: str, gen: int, at: int, cause: str | None = None, run: str = RUN) -> Header:
    return Header(event_id, run, gen, at, "controller", cause)


def opened(auto: bool = False, world: World | None = None) -> truth.Truth:
    """A truth that has read the run submitted, admitted and its generation 1 started."""
    t = truth.Truth(plan(auto), frozenset(NODES), RUN, world or World())
    t.appended([(RUNS, RunSubmitted(header=h("sub", 0, 1), spec_digest="sha256:x",
                                    spec_json="{}", principal="alice", world_size=2,
                                    dataset_id="ds")),
                (RUNS, RunAdmitted(header=h("adm", 1, 2), members=GANG)),
                (RUNS, GenerationStarted(header=h("g1", 1, 2), members=GANG,
                                         reason="admitted", resume_step=0))])
    return t
