"""The verdict on a silent-data-corruption suspicion, from its replay. Pure.

A suspicion (``events.state.Suspicion``) holds what each rank held at the
suspect step (``F``, a fingerprint per rank) and where it ran; the replay
(``StepReplayed``) holds what each rank recomputed there (``R``) and where.
Data-parallel replicas must hold the same state, so a rank's state is right
when it equals the others'. ``D`` is the suspicion's deviating ranks (every
rank when it names none); the ranks outside it are the reference. Rules, the
first that applies decides:

1. the replay agrees (every rank recomputed one value) and it equals what
   every rank held: ``reproduced``, the job's own numerics (a loss that really
   diverges), no rank or node blamed;
2. the replay agrees on a value that at least one rank held, and every rank
   outside ``D`` held: ``transient`` on the ranks that held something else
   (their nodes as the suspicion saw them), a one-off the replay did not repeat;
3. the replay agrees otherwise (on a value no rank held, or only a deviating
   one): ``nondeterministic``, the job does not recompute its own state;
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
from events.sdc import StepReplayed
from events.state import Suspicion

REPRODUCED, TRANSIENT, NODE_FAULT, NONDETERMINISTIC = (
    "reproduced", "transient", "node_fault", "nondeterministic")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``CorruptionClassified`` says: the verdict, the ranks and nodes blamed, why."""

    verdict: str
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    detail: str


@dataclass(frozen=True, slots=True)
class _Seen:
    value: str
    rank: int
    node: str
    replay: bool


def classify(s: Suspicion, r: StepReplayed) -> Verdict:
    """The verdict on ``s`` from its replay ``r`` (rules in the module docstring)."""
    held, again = s.fingerprints, r.fingerprints
    where = f"step {s.step} of generation {s.generation}, replayed in generation {r.generation}"
    deviating = set(s.ranks) or set(range(len(held)))
    if len(set(again)) == 1:
        (v,) = set(again)
        right = {i for i, f in enumerate(held) if f == v}
        if len(right) == len(held):  # rule 1
            return Verdict(REPRODUCED, (), (), f"{where}: every rank recomputed the state it "
                           f"held ({_short(v)}): the job's own numerics, no hardware blamed")
        reference = set(range(len(held))) - deviating
        if right and reference <= right:  # rule 2
            wrong = tuple(sorted(set(range(len(held))) - right))
            nodes = tuple(sorted({s.nodes[i] for i in wrong}))
            return Verdict(TRANSIENT, wrong, nodes, f"{where}: the replay agreed on "
                           f"{_short(v)}, which ranks {sorted(right)} held; ranks "
                           f"{list(wrong)} on {', '.join(nodes)} held something else once")
        return Verdict(NONDETERMINISTIC, (), (), f"{where}: the replay agreed on "
                       f"{_short(v)}, which no reference rank held: the job does not "
                       "recompute its own state")  # rule 3
    return _disagreed(s, r, where)


def _disagreed(s: Suspicion, r: StepReplayed, where: str) -> Verdict:
    seen = ([_Seen(f, i, s.nodes[i], False) for i, f in enumerate(s.fingerprints)]
            + [_Seen(f, i, r.nodes[i], True) for i, f in enumerate(r.fingerprints)])
    ranked = Counter(o.value for o in seen).most_common()
    if (len(ranked) > 1 and ranked[0][1] == ranked[1][1]) or ranked[0][1] < 2:  # rule 4
        return Verdict(NONDETERMINISTIC, (), (), f"{where}: the replay disagreed again and no "
                       "state was recomputed by more ranks than any other; no node blamed")
    right = ranked[0][0]
    wrong = [o for o in seen if o.value != right]
    nodes = sorted({o.node for o in wrong})
    ranks = tuple(sorted({o.rank for o in wrong}))
    before = [o for o in wrong if not o.replay]
    after = [o for o in wrong if o.replay]
    evidence = "; ".join(f"rank {o.rank} on {o.node} {'recomputed' if o.replay else 'held'} "
                         f"{_short(o.value)}" for o in wrong)
    if len(nodes) == 1 and before and after:  # rule 5
        return Verdict(NODE_FAULT, ranks, (nodes[0],), f"{where}: every wrong state was "
                       f"computed on {nodes[0]}, against {_short(right)} elsewhere: {evidence}")
    if {o.rank for o in before} == {o.rank for o in after} \
            and not {o.node for o in before} & {o.node for o in after}:  # rule 6
        return Verdict(NONDETERMINISTIC, ranks, (), f"{where}: ranks {list(ranks)} were wrong "
                       f"again on other nodes, so the fault follows the rank, not a machine: "
                       f"{evidence}")
    return Verdict(NONDETERMINISTIC, ranks, (), f"{where}: nothing reproduces: "
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
