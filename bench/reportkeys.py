"""Keys for a benchmark's hand-written reports, as real agents and workers hold them.

A secure stack's controller and projector believe an agent's report only under
its node's enrolled key, and a worker's only under a run key that a node hosting
the run certified (``events.kafka.reportdoor``, ``events.kafka.runkeys``); an unsigned one is
refused, so a benchmark that writes reports itself must sign them as the real
senders do, or it would time the door's refusal instead of the work.
:class:`ReportKeys` makes one node key per node when a report first needs it,
registers it on ``runledger.keys`` with the stack's admin key (the same record
as ``runledger node enroll``) and issues one run key per run, generation and
node. On a cluster whose keys log has no trust anchor (a plaintext stack)
nothing is signed, as agents there sign nothing, and an unknown key would be
refused even there.

Signing happens where the real sender signs: a benchmark that times a report's
path from its producer includes it, as it includes the door's verification.

Tested in tests/test_run_all.py (every benchmark's --quick form runs).
"""

from __future__ import annotations

import time

from agent.node import send_report as agent_send
from events.kafka import runkeys
from events.kafka.clients import EventProducer
from events.kafka.reportdoor import AGENT_ROLE, about, node_principal
from events.kafka.runkeys import RunKey
from events.model import Event
from events.signed.keyring import KeyRing
from events.signed.signing import Headers, SigningKey, sign_report
from runledger import keylog


class ReportKeys:
    """Node keys enrolled on first use and run keys per (run, generation, node)."""

    def __init__(self, bootstrap: str, admin: SigningKey | None) -> None:
        self.bootstrap = bootstrap
        self.admin = admin
        self.ring: KeyRing = keylog.load_ring(bootstrap).ring
        self.signing = self.ring.anchor is not None
        if self.signing and admin is None:
            raise SystemExit(
                f"{bootstrap}'s keys log has a trust anchor, so its controller refuses unsigned "
                "reports: pass --admin-key with its admin key (a stack's keys/admin.key) so "
                "the benchmark can enroll its nodes, or use a throwaway stack")
        self.nodes: dict[str, SigningKey] = {}
        self.runs: dict[tuple[str, int, str], RunKey] = {}
        self.enroll_s = 0.0

    def node(self, name: str) -> SigningKey:
        key = self.nodes.get(name)
        if key is None:
            assert self.admin is not None  # __init__ refuses a signing cluster without one
            started = time.perf_counter()
            key = SigningKey.generate()
            event = keylog.registration(node_principal(name), AGENT_ROLE, key.public,
                                        now_ms=time.time_ns() // 1_000_000, by="bench",
                                        reason=f"benchmark node {name}")
            self.ring = keylog.append(self.bootstrap, self.ring, event, self.admin).ring
            self.nodes[name] = key
            self.enroll_s += time.perf_counter() - started
        return key

    def operator(self, principal: str) -> SigningKey:
        """A new key registered to ``principal`` for the operator role (the record of
        ``runledger key register --role operator``): what its requests are signed with.
        On a cluster without a trust anchor nothing is registered."""
        key = SigningKey.generate()
        if self.signing:
            assert self.admin is not None  # __init__ refuses a signing cluster without one
            event = keylog.registration(principal, "operator", key.public,
                                        now_ms=time.time_ns() // 1_000_000, by="bench",
                                        reason=f"benchmark operator {principal}")
            self.ring = keylog.append(self.bootstrap, self.ring, event, self.admin).ring
        return key

    def enroll(self, names: list[str]) -> None:
        """Enroll every node of ``names`` not enrolled yet, in one turn on the keys log
        (``runledger.keylog.append_all``): a fleet of thousands enrolls in seconds."""
        todo = [n for n in names if n not in self.nodes]
        if not todo or not self.signing:
            return
        assert self.admin is not None  # __init__ refuses a signing cluster without one
        started = time.perf_counter()
        made = {n: SigningKey.generate() for n in todo}
        now = time.time_ns() // 1_000_000
        events = [keylog.registration(node_principal(n), AGENT_ROLE, k.public, now_ms=now,
                                      by="bench", reason=f"benchmark node {n}")
                  for n, k in made.items()]
        written = keylog.append_all(self.bootstrap, self.ring, events, self.admin)
        self.ring = written[-1].ring
        self.nodes.update(made)
        self.enroll_s += time.perf_counter() - started

    def headers(self, event: Event, value: bytes, node: str | None = None) -> Headers:
        """What the real sender attaches to ``event``'s ``value`` on ``runledger.reports``:
        the node's signature on an agent's report, the run key's on a worker's (``node``:
        the member's node, when the event names none). Nothing on a plaintext cluster."""
        if not self.signing:
            return ()
        agent_node = about(event)
        if agent_node is not None:
            return sign_report(self.node(agent_node), value)
        return self.run_key(event, node).headers(value)

    def run_key(self, event: Event, node: str | None = None) -> RunKey:
        """The key a worker of ``event``'s run and generation on its node signs with."""
        on = getattr(event, "node", None) or node
        if not isinstance(on, str):
            raise ValueError(f"{event.event_type} of {event.run_id} names no node to sign for")
        at = (event.run_id, event.header.generation, on)
        run_key = self.runs.get(at)
        if run_key is None:
            run_key = self.runs[at] = RunKey.issue(self.node(on), *at)
        return run_key

    def send(self, producer: EventProducer, event: Event, node: str | None = None) -> None:
        """Queue ``event`` on ``runledger.reports`` through its real sender's own path:
        an agent's (``agent.node.send_report``) or a worker's (``events.kafka.runkeys``)."""
        if not self.signing:
            runkeys.send_report(producer, event, None)
            return
        agent_node = about(event)
        if agent_node is not None:
            agent_send(producer, event, self.node(agent_node))
        else:
            runkeys.send_report(producer, event, self.run_key(event, node))
