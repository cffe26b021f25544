"""The verdict on a silent-data-corruption suspicion, from its replay. Pure.

A suspicion (``events.state.Suspicion``) holds what each rank held at the
suspect step (``F``, a fingerprint per rank) and where it ran; the replay
(``StepReplayed``) holds what each rank recomputed there (``R``) and where.
Data-parallel replicas must hold the same state, so a rank's state is right
when it equals the others'. ``D`` is the suspicion's deviating ranks (every
rank when it names none); the ranks outside it are the reference.

Each rank against its own recomputation, earliest first. Both reports may also
carry, per rank, the fingerprint of the state the rank *consumed* at the step
(parameters and optimizer state before the update, as they lay at rest since
the step before). What a rank held after the update cannot name a rank whose
state changed at rest: its corrupted parameter fed its forward, the all-reduce
averaged the gradient that came of it into every replica, and so every rank
held something the clean replay does not recompute (issue #32: 35 of 40 such
flips were ``nondeterministic`` with no rank blamed). So when both reports carry
the consumed state of every rank and those differ anywhere (a rank consumed
other state than another, or than its own recomputation), the divergence began
at rest, before the step, and the rules below judge the consumed fingerprints
(``D`` then being the ranks outside their strict majority, every rank on a
tie); otherwise they judge what each rank held after the update. The first
rule that applies decides:

1. the replay agrees (every rank recomputed one value) and it equals what
   every rank held: ``reproduced``, the job's own numerics (a loss that really
   diverges), no rank or node blamed;
2. the replay agrees on a value that at least one rank held, and every rank
   outside ``D`` held: ``transient`` on the ranks that held something else
   (their nodes as the suspicion saw them), a one-off the replay did not repeat
   (on the consumed state: a value corrupted at rest on those ranks);
3. the replay agrees otherwise (on a value no rank held, or only a deviating
   one): ``nondeterministic``, the job does not recompute its own state; except
   a ``nonfinite`` suspicion that named ranks (those whose values went
   non-finite first, their own loss before the all-reduce spread the damage to
   every replica: ``worker.sdc``), judged on what the ranks held: ``transient``
   on those ranks, since the replay recomputed one state everywhere and a
   deterministic job that really diverges there recomputes what it held (rule 1);
4. the replay disagrees: the right value is the one most observations (the
   suspicion's and the replay's together) hold, when one value holds strictly
   more than any other and at least two; without one, ``nondeterministic``
   (the same disagreement on the same placement says nothing about which node);
5. every wrong observation, in the suspicion and in the replay, is on one node,
   and there is one in each: ``node_fault`` on that node, whichever rank ran
   there (the controller quarantines it with this evidence);
6. the same ranks are wrong in both but on different nodes: ``nondeterministic``,
   the fault follows the rank (its data or code), not a machine;
7. anything else (nothing reproduces): ``nondeterministic``.

A replay on the same placement cannot tell two replicas' nodes apart (rule 4).
So the restart that replays a suspicion (``controller.run_decide``, rule 3)
places it with :func:`replay_members`: the first deviating rank still on the
node where it deviated swaps places with a rank on another node (one outside
the deviating set when there is one), so the suspect node recomputes another
rank's step and the suspect rank recomputes its own elsewhere, and rules 5 and
6 can tell a machine from a rank. Only for pure data parallelism (one rank per
replica), where every rank holds the same state.

Tested in tests/controller/test_sdc_verdict.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from events.model import Member
from events.sdc import StepReplayed, deviating
from events.state import Suspicion

REPRODUCED, TRANSIENT, NODE_FAULT, NONDETERMINISTIC = (
    "reproduced", "transient", "node_fault", "nondeterministic")
NONFINITE = "nonfinite"  # the detector whose named ranks are the first non-finite ones
HELD = "held"  # the stage after the update (what each rank held), as the details say


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``CorruptionClassified`` says: the verdict, the ranks and nodes blamed, why."""

    verdict: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    detail: str


@dataclass(frozen=True, slots=True)
class _Stage:
    """One point of the step's dataflow the rules judge: each rank's fingerprint there
    in the suspicion (``held``) and in the replay (``again``), and the words for it."""

    held: tuple[str, ...]
    again: tuple[str, ...]
    deviating: frozenset[int]
    had: str  # what a rank did with the state in the suspect run: "held", "consumed"
    redid: str  # ... and in the replay
    prefix: str  # what the detail says first


@dataclass(frozen=True, slots=True)
class _Seen:
    value: str
    rank: int
    node: str
    replay: bool


def classify(s: Suspicion, r: StepReplayed) -> Verdict:
    """The verdict on ``s`` from its replay ``r`` (rules in the module docstring)."""
    where = f"step {s.step} of generation {s.generation}, replayed in generation {r.generation}"
    return _judge(s, r, _stage(s, r), where)


def diverged_at_rest(s: Suspicion, r: StepReplayed) -> bool:
    """Both reports carry every rank's consumed state, and it is not one value: the
    divergence began before the step, at rest."""
    known = (len(s.consumed) == len(s.fingerprints) and len(r.consumed) == len(r.fingerprints)
             and all(s.consumed) and all(r.consumed))
    return known and len(set(s.consumed) | set(r.consumed)) > 1


def _stage(s: Suspicion, r: StepReplayed) -> _Stage:
    everyone = frozenset(range(len(s.fingerprints)))
    if diverged_at_rest(s, r):
        return _Stage(s.consumed, r.consumed, frozenset(deviating(s.consumed)) or everyone,
                      "consumed", "consumed again",
                      f"the state consumed at step {s.step} (before the update) differs: ")
    return _Stage(s.fingerprints, r.fingerprints, frozenset(s.ranks) or everyone,
                  HELD, "recomputed", "")


def _judge(s: Suspicion, r: StepReplayed, st: _Stage, where: str) -> Verdict:
    held, again = st.held, st.again
    head = f"{where}: {st.prefix}"
    if len(set(again)) == 1:
        (v,) = set(again)
        right = {i for i, f in enumerate(held) if f == v}
        if len(right) == len(held):  # rule 1
            return Verdict(REPRODUCED, (), (), f"{head}every rank {st.redid} the state it "
                           f"{st.had} ({_short(v)}): the job's own numerics, no hardware blamed")
        reference = set(range(len(held))) - st.deviating
        if right and reference <= right:  # rule 2
            wrong = tuple(sorted(set(range(len(held))) - right))
            nodes = tuple(sorted({s.nodes[i] for i in wrong}))
            return Verdict(TRANSIENT, wrong, nodes, f"{head}the replay agreed on "
                           f"{_short(v)}, which ranks {sorted(right)} {st.had}; ranks "
                           f"{list(wrong)} on {', '.join(nodes)} {st.had} something else once")
        if s.detector == NONFINITE and s.ranks and st.had == HELD:  # rule 3, the exception
            nodes = tuple(sorted({s.nodes[i] for i in s.ranks}))
            return Verdict(TRANSIENT, s.ranks, nodes, f"{head}the replay agreed on "
                           f"{_short(v)}, which no rank held: ranks {list(s.ranks)} on "
                           f"{', '.join(nodes)} went non-finite first, before the all-reduce "
                           "spread it to every replica, and the replay did not repeat it")
        return Verdict(NONDETERMINISTIC, (), (), f"{head}the replay agreed on "
                       f"{_short(v)}, which no reference rank {st.had}: the job does not "
                       "recompute its own state")  # rule 3
    return _disagreed(s, r, st, head)


def _disagreed(s: Suspicion, r: StepReplayed, st: _Stage, head: str) -> Verdict:
    seen = ([_Seen(f, i, s.nodes[i], False) for i, f in enumerate(st.held)]
            + [_Seen(f, i, r.nodes[i], True) for i, f in enumerate(st.again)])
    ranked = Counter(o.value for o in seen).most_common()
    if (len(ranked) > 1 and ranked[0][1] == ranked[1][1]) or ranked[0][1] < 2:  # rule 4
        return Verdict(NONDETERMINISTIC, (), (), f"{head}the replay disagreed again and no "
                       "state was recomputed by more ranks than any other; no node blamed")
    right = ranked[0][0]
    wrong = [o for o in seen if o.value != right]
    nodes = sorted({o.node for o in wrong})
    ranks = tuple(sorted({o.rank for o in wrong}))
    before = [o for o in wrong if not o.replay]
    after = [o for o in wrong if o.replay]
    evidence = "; ".join(f"rank {o.rank} on {o.node} {st.redid if o.replay else st.had} "
                         f"{_short(o.value)}" for o in wrong)
    if len(nodes) == 1 and before and after:  # rule 5
        return Verdict(NODE_FAULT, ranks, (nodes[0],), f"{head}every wrong state was "
                       f"computed on {nodes[0]}, against {_short(right)} elsewhere: {evidence}")
    if {o.rank for o in before} == {o.rank for o in after} \
            and not {o.node for o in before} & {o.node for o in after}:  # rule 6
        return Verdict(NONDETERMINISTIC, ranks, (), f"{head}ranks {list(ranks)} were wrong "
                       f"again on other nodes, so the fault follows the rank, not a machine: "
                       f"{evidence}")
    return Verdict(NONDETERMINISTIC, ranks, (), f"{head}nothing reproduces: "
                   f"{evidence}")  # rule 7


def replay_members(members: tuple[Member, ...], s: Suspicion) -> tuple[Member, ...] | None:
    """The placement that replays ``s`` with a suspect rank and its node apart, or None
    when no deviating rank can move (none named, or every rank on one node)."""
    for i in s.ranks:
        if i >= len(members) or i >= len(s.nodes) or members[i].node != s.nodes[i]:
            continue  # not this group's rank, or it has moved already
        others = [j for j in range(len(members)) if members[j].node != members[i].node]
        if not others:
            continue
        j = next((k for k in others if k not in s.ranks), others[0])
        a, b = members[i], members[j]
        out = list(members)
        out[i] = Member(a.logical_id, b.node, b.slot, b.domain)
        out[j] = Member(b.logical_id, a.node, a.slot, a.domain)
        return tuple(out)
    return None


def _short(fingerprint: str) -> str:
    return fingerprint[:16] or "''"
