"""The agent's start line for its node (agent.nodestate): pure, and as the controller sees it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from agent import nodestate
from agent.node import node_state_line
from controller.inventory import EMPTY, Node, observe, state_of
from events.model import (
    Event,
    Header,
    NodeCordoned,
    NodeQuarantined,
    NodeQuarantineExpired,
    NodeUncordoned,
    node_key,
)

NODE = "n1"
AT = 1_718_000_000_000  # 2024-06-10T06:13:20Z


def header(i: int, at: int) -> Header:
    return Header(f"{node_key(NODE)}/fact/{i}", node_key(NODE), 0, at, "controller")


def fact(kind: str, i: int, at: int, node: str = NODE) -> Event:
    h = header(i, at)
    if kind == "quarantine":
        return NodeQuarantined(header=h, node=node, reason=f"{i} failures on the node")
    if kind in ("cordon", "drain"):
        return NodeCordoned(header=h, node=node, mode=kind, principal="alice",
                            reason=f"reason {i}")
    if kind == "uncordon":
        return NodeUncordoned(header=h, node=node, principal="alice", reason="fixed",
                              failures_cleared=3)
    return NodeQuarantineExpired(header=h, node=node, reason="expired", failures=2)


KINDS = ("quarantine", "cordon", "drain", "uncordon", "expire")


def test_a_node_without_facts_is_ready() -> None:
    assert nodestate.line(NODE, nodestate.fold(NODE, [])) == "node n1: ready"


def test_a_quarantined_node_says_since_when_why_and_what_frees_it() -> None:
    facts = nodestate.fold(NODE, [fact("cordon", 1, AT - 5000), fact("quarantine", 3, AT),
                                  fact("quarantine", 9, AT, node="n2")])
    assert nodestate.line(NODE, facts) == (
        "node n1: quarantined since 2024-06-10T06:13:20Z (3 failures on the node); no new "
        "run is placed here and none restarts here; `runledger node uncordon n1 --reason R` "
        "frees it")


def test_a_drained_node_is_cordoned_and_an_uncordon_frees_everything() -> None:
    drained = nodestate.fold(NODE, [fact("drain", 4, AT)])
    assert nodestate.line(NODE, drained) == (
        "node n1: cordoned since 2024-06-10T06:13:20Z (drained: reason 4 (by alice)); no new "
        "run is placed here; `runledger node uncordon n1 --reason R` frees it")
    freed = nodestate.fold(NODE, [fact("drain", 4, AT), fact("quarantine", 5, AT),
                                  fact("uncordon", 6, AT)])
    assert nodestate.state(freed) == ("ready", "", 0)


@given(st.lists(st.sampled_from(KINDS), max_size=12))
def test_the_agent_s_fold_agrees_with_the_controller_s_inventory(kinds: list[str]) -> None:
    events = [fact(kind, i, AT + 1000 * i) for i, kind in enumerate(kinds)]
    inventory = EMPTY
    for e in events:
        inventory = observe(inventory, e)
    node = inventory.nodes.get(NODE, Node(NODE, 0, "", 0))
    # Just started: the agent is alive and runs nothing (a drained node is idle).
    alive = replace(node, last_seen=AT + 1000 * len(kinds), busy_slots=0)
    assert nodestate.state(nodestate.fold(NODE, events)) == state_of(
        alive, alive.last_seen, 15_000)


def test_a_log_that_cannot_be_read_is_a_state_unknown_within_the_timeout() -> None:
    said = node_state_line("127.0.0.1:9", NODE, timeout_s=1.0)
    assert said.startswith("node n1: state unknown (its facts on runledger.runs could not "
                           "be read: ")
    assert said.endswith("); `runledger nodes` shows it")
