"""The SDC classifier: every rule, and properties of the verdicts it can reach."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.sdc_verdict import (
    NODE_FAULT,
    NONDETERMINISTIC,
    REPRODUCED,
    TRANSIENT,
    Verdict,
    classify,
    replay_members,
)
from events.model import Member
from events.sdc import StepReplayed
from events.state import Suspicion
from tests.events.builders import Ev


def suspicion(held: str, nodes: str = "ab", ranks: tuple[int, ...] = (),
              detector: str = "agreement", consumed: str = "") -> Suspicion:
    """``held``, ``nodes`` and ``consumed``: one letter per rank (a fingerprint, a node,
    the fingerprint of the state the step consumed; none when empty)."""
    return Suspicion(step=12, generation=1, detector=detector, ranks=ranks,
                     fingerprints=tuple(held), nodes=tuple(f"node-{n}" for n in nodes),
                     part="params", consumed=tuple(consumed))


def replay(again: str, nodes: str = "ab", consumed: str = "") -> StepReplayed:
    return Ev().replayed(2, 12, 1, fingerprints=tuple(again),
                         nodes=tuple(f"node-{n}" for n in nodes), consumed=tuple(consumed))


def test_rule_1_a_replay_of_what_every_rank_held_is_the_jobs_own_numerics() -> None:
    v = classify(suspicion("xx", detector="nonfinite"), replay("xx"))
    assert (v.verdict, v.ranks, v.nodes) == (REPRODUCED, (), ())
    assert "step 12 of generation 1, replayed in generation 2" in v.detail


def test_rule_2_the_replay_agrees_with_the_reference_ranks_a_one_off() -> None:
    v = classify(suspicion("xxyx", "abcd", ranks=(2,)), replay("xxxx", "abcd"))
    assert (v.verdict, v.ranks, v.nodes) == (TRANSIENT, (2,), ("node-c",))
    # Two replicas: both are listed as deviating; the replay settles which one was right.
    v = classify(suspicion("xy", ranks=(0, 1)), replay("yy", "ba"))
    assert (v.verdict, v.ranks, v.nodes) == (TRANSIENT, (0,), ("node-a",))


def test_rule_3_a_replay_that_agrees_on_no_reference_state_is_nondeterministic() -> None:
    assert classify(suspicion("xxyx", "abcd", ranks=(2,)), replay("zzzz", "abcd")).verdict \
        == NONDETERMINISTIC
    # It agrees only with the deviating rank: the reference ranks did not reproduce.
    v = classify(suspicion("xxyx", "abcd", ranks=(2,)), replay("yyyy", "abcd"))
    assert (v.verdict, v.nodes) == (NONDETERMINISTIC, ())
    # Every rank held one value, the replay agreed on another.
    assert classify(suspicion("xx", detector="spike"), replay("zz")).verdict == NONDETERMINISTIC


def test_rule_4_the_same_disagreement_on_the_same_placement_blames_no_node() -> None:
    v = classify(suspicion("xy", ranks=(0, 1)), replay("xy"))
    assert (v.verdict, v.nodes) == (NONDETERMINISTIC, ())
    assert "no node blamed" in v.detail
    # Every observation differs: no value holds a majority either.
    assert classify(suspicion("xy", ranks=(0, 1)), replay("zw")).verdict == NONDETERMINISTIC


def test_rule_5_a_deviation_again_on_the_same_node_is_that_nodes_fault() -> None:
    # Four replicas, rank 2 on node-c deviates twice, the others reproduce.
    v = classify(suspicion("xxyx", "abcd", ranks=(2,)), replay("xxzx", "abcd"))
    assert (v.verdict, v.ranks, v.nodes) == (NODE_FAULT, (2,), ("node-c",))
    assert "rank 2 on node-c held y" in v.detail and "recomputed z" in v.detail
    # Two replicas swapped nodes for the replay: node-b is wrong whichever rank runs there.
    v = classify(suspicion("xy", "ab", ranks=(0, 1)), replay("zx", "ba"))
    assert (v.verdict, v.ranks, v.nodes) == (NODE_FAULT, (0, 1), ("node-b",))
    # The deviating rank reproduced its wrong state exactly, on the same node.
    assert classify(suspicion("xxy", "abc", ranks=(2,)), replay("xxy", "abc")).nodes == \
        ("node-c",)


def test_rule_6_a_deviation_that_follows_the_rank_to_another_node_is_the_jobs() -> None:
    v = classify(suspicion("xxyx", "abcd", ranks=(2,)), replay("xxyx", "abed"))
    assert (v.verdict, v.ranks, v.nodes) == (NONDETERMINISTIC, (2,), ())
    assert "follows the rank" in v.detail
    v = classify(suspicion("xy", "ab", ranks=(0, 1)), replay("xz", "ba"))  # rank 1, a then b
    assert (v.verdict, v.nodes) == (NONDETERMINISTIC, ())
    assert "follows the rank" in v.detail


def test_rule_7_nothing_reproduces() -> None:
    # Rank 2 was wrong on node-c, then rank 3 on node-d: two machines, two ranks.
    v = classify(suspicion("xxyx", "abcd", ranks=(2,)), replay("xxxz", "abcd"))
    assert (v.verdict, v.ranks, v.nodes) == (NONDETERMINISTIC, (2, 3), ())
    assert "nothing reproduces" in v.detail
    # The suspicion held one value everywhere; the replay disagrees on one node only.
    assert classify(suspicion("xxx", "abc", detector="spike"),
                    replay("xxz", "abc")).verdict == NONDETERMINISTIC


def test_a_state_corrupted_at_rest_is_transient_on_the_rank_that_consumed_it() -> None:
    # Rank 1's parameter flipped between steps; the all-reduce carried its gradient into
    # rank 0, so neither held what the replay recomputes: by what they held, rule 3.
    held = suspicion("xy", ranks=(0, 1), consumed="cd")
    v = classify(held, replay("zz", "ba", consumed="cc"))
    assert (v.verdict, v.ranks, v.nodes) == (TRANSIENT, (1,), ("node-b",))
    assert "state consumed at step 12 (before the update) differs" in v.detail
    assert "ranks [1] on node-b consumed something else once" in v.detail
    assert classify(suspicion("xy", ranks=(0, 1)), replay("zz", "ba")).verdict == \
        NONDETERMINISTIC  # the same without the consumed state: nobody blamed
    # Four replicas: the majority of what they consumed names the suspect.
    v = classify(suspicion("xxyx", "abcd", ranks=(2,), consumed="ccdc"),
                 replay("zzzz", "abcd", consumed="cccc"))
    assert (v.verdict, v.ranks, v.nodes) == (TRANSIENT, (2,), ("node-c",))


def test_the_consumed_state_follows_the_same_rules_when_it_diverges() -> None:
    # Rank 1 consumed a corrupted state again on the same node after the swap: node-b.
    v = classify(suspicion("xy", "ab", ranks=(0, 1), consumed="cd"),
                 replay("zw", "ba", consumed="ec"))
    assert (v.verdict, v.ranks, v.nodes) == (NODE_FAULT, (0, 1), ("node-b",))
    assert "rank 0 on node-b consumed again e" in v.detail
    # Every rank consumed one state, the replay another: the job does not restore its own.
    v = classify(suspicion("xx", consumed="cc"), replay("zz", consumed="dd"))
    assert (v.verdict, v.ranks) == (NONDETERMINISTIC, ())
    assert "consumed" in v.detail


def test_without_a_divergence_at_rest_what_each_rank_held_decides() -> None:
    # Every rank consumed what the replay consumed: the fault was within the step.
    v = classify(suspicion("xy", ranks=(0, 1), consumed="cc"), replay("yy", "ba", consumed="cc"))
    assert (v.verdict, v.ranks) == (TRANSIENT, (0,)) and "consumed" not in v.detail
    # A rank that took no consumed fingerprint, or a v1 report without any: what each rank
    # held decides (here rule 3), never a half-known consumed state.
    def held(consumed: tuple[str, ...]) -> Suspicion:
        return Suspicion(step=12, generation=1, detector="agreement", ranks=(0, 1),
                         fingerprints=("x", "y"), nodes=("node-a", "node-b"), part="",
                         consumed=consumed)

    for took, retook in ((("c", ""), ("c", "c")), ((), ("c", "c")), (("c", "d"), ()),
                         (("c", "d"), ("c", ""))):
        again = Ev().replayed(2, 12, 1, fingerprints=("z", "z"), nodes=("node-b", "node-a"),
                              consumed=retook)
        v = classify(held(took), again)
        assert v.verdict == NONDETERMINISTIC and "consumed" not in v.detail


def test_a_non_finite_catch_blames_the_ranks_that_went_non_finite_first() -> None:
    # Rank 1's own loss went non-finite and the all-reduce spread it: the replay agreed
    # on a state no rank held, and did not repeat it.
    v = classify(suspicion("xy", ranks=(1,), detector="nonfinite"), replay("zz", "ba"))
    assert (v.verdict, v.ranks, v.nodes) == (TRANSIENT, (1,), ("node-b",))
    assert "went non-finite first" in v.detail
    # Every rank went non-finite at once: nobody to blame.
    assert classify(suspicion("xx", detector="nonfinite"), replay("zz")).verdict == \
        NONDETERMINISTIC
    # The same non-finite state again is the job's own (rule 1), whoever went first.
    assert classify(suspicion("xx", ranks=(1,), detector="nonfinite"),
                    replay("xx")).verdict == REPRODUCED


_VALUES = st.text("xyz", min_size=1, max_size=1)


@given(st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(_VALUES, min_size=n, max_size=n), st.lists(st.sampled_from("abcdef"),
                                                        min_size=n, max_size=n),
    st.lists(_VALUES, min_size=n, max_size=n), st.lists(st.sampled_from("abcdef"),
                                                        min_size=n, max_size=n),
    st.sets(st.integers(0, n - 1)))))
def test_every_pair_gets_one_consistent_verdict(
        case: tuple[list[str], list[str], list[str], list[str], set[int]]) -> None:
    held, where, again, there, ranks = case
    s = suspicion("".join(held), "".join(where), tuple(sorted(ranks)))
    v = classify(s, replay("".join(again), "".join(there)))
    assert isinstance(v, Verdict) and v.detail
    if v.verdict == REPRODUCED:
        assert held == again and len(set(again)) == 1
    if v.verdict == NODE_FAULT:
        (node,) = v.nodes  # one machine, which ran a wrong state in both runs
        assert node[-1] in where and node[-1] in there
        assert len(set(again)) > 1
    if v.verdict == TRANSIENT:
        assert len(set(again)) == 1 and v.ranks and set(v.ranks) <= (ranks or set(range(len(held))))
    if v.verdict != NODE_FAULT:
        assert v.verdict in (REPRODUCED, TRANSIENT) or v.nodes == ()


@given(st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(_VALUES, min_size=n, max_size=n), st.lists(_VALUES, min_size=n, max_size=n),
    st.lists(_VALUES, min_size=n, max_size=n), st.lists(_VALUES, min_size=n, max_size=n),
    st.lists(st.sampled_from("abcdef"), min_size=n, max_size=n),
    st.sampled_from(["agreement", "nonfinite"]))))
def test_a_divergence_at_rest_is_judged_on_the_consumed_state_alone(
        case: tuple[list[str], list[str], list[str], list[str], list[str], str]) -> None:
    held, again, took, retook, where, detector = case
    s = suspicion("".join(held), "".join(where), (), detector, "".join(took))
    r = replay("".join(again), "".join(where), "".join(retook))
    v = classify(s, r)
    if len(set(took) | set(retook)) == 1:  # no divergence at rest: as without it
        plain = classify(suspicion("".join(held), "".join(where), (), detector),
                         replay("".join(again), "".join(where)))
        assert v == plain
    else:  # what each rank held after the update says nothing more
        other = classify(suspicion("z" * len(held), "".join(where), (), detector,
                                   "".join(took)), replay("".join(again), "".join(where),
                                                          "".join(retook)))
        assert (v.verdict, v.ranks, v.nodes) == (other.verdict, other.ranks, other.nodes)
        assert v.verdict != REPRODUCED
        if v.verdict == TRANSIENT:
            assert len(set(retook)) == 1 and all(took[i] != retook[0] for i in v.ranks)


def placed(*nodes: str) -> tuple[Member, ...]:
    return tuple(Member(f"r{i}", f"node-{n}", 0, f"d-{n}") for i, n in enumerate(nodes))


def test_a_replay_swaps_a_suspect_rank_with_a_reference_rank_on_another_node() -> None:
    moved = replay_members(placed("a", "b", "c"), suspicion("xyx", "abc", ranks=(1,)))
    assert moved == (Member("r0", "node-b", 0, "d-b"), Member("r1", "node-a", 0, "d-a"),
                     Member("r2", "node-c", 0, "d-c"))
    # Two replicas, both listed: the first one moves.
    assert [m.node for m in replay_members(placed("a", "b"),  # type: ignore[union-attr]
                                           suspicion("xy", ranks=(0, 1)))] == \
        ["node-b", "node-a"]
    # A reference rank is preferred to another suspect one.
    moved = replay_members(placed("a", "b", "c"), suspicion("xyy", "abc", ranks=(1, 2)))
    assert moved is not None and [m.node for m in moved] == ["node-b", "node-a", "node-c"]


def test_no_move_without_a_suspect_rank_another_node_or_when_it_moved_already() -> None:
    assert replay_members(placed("a", "b"), suspicion("xx", detector="nonfinite")) is None
    assert replay_members(placed("a", "a"), suspicion("xy", "aa", ranks=(1,))) is None
    assert replay_members(placed("b", "a"), suspicion("xy", "ab", ranks=(0, 1))) is None
    assert replay_members(placed("a"), suspicion("xy", "ab", ranks=(1,))) is None
