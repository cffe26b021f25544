"""A spec that requires a drill is not admitted before one passed for its digest, then is.

Real processes on a private secure broker (tests/e2e/harness.py): a controller
that requires signed requests, one agent, and the evidence written as the
drill command writes it (``runledger.signer.send_request``, keyed by the spec's
digest). An unsigned piece of evidence is not believed.
"""

from __future__ import annotations

import time
import uuid

import pytest
import yaml

from controller.spec.runspec import parse_spec
from events.base import spec_key
from events.model import DrillCompleted, Header
from runledger.signer import send_request
from tests.e2e.harness import Cluster, of_type, spec, wait
from tests.e2e.signed import submit_signed
from tests.events.signed_log import CAST

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def drilled(digest: str, fault: str, verdict: str) -> DrillCompleted:
    key = spec_key(digest)
    return DrillCompleted(
        header=Header(f"{key}/drill/{uuid.uuid4().hex[:12]}", key, 0, int(time.time() * 1000),
                      "cli/alice"),
        spec_digest=digest, principal="alice", fault=fault, verdict=verdict,
        drill_run_id="drill-1", rpo_s=None, rto_s=None,
        reason="not here" if verdict == "skip" else "", checks=())


def test_a_drill_gated_spec_waits_queued_with_the_reason_then_is_admitted(
    cluster: Cluster,
) -> None:
    cluster.controller("ctl", "controller")
    cluster.agent("n1", 2)
    doc = spec("gated", ["--steps", "5", "--step-time", "0.1"], gates={"require": ["drill"]})
    digest = parse_spec(yaml.safe_dump(doc), "gated").digest()
    run, _ = submit_signed(cluster, doc, "alice", CAST.alice)

    def queued_for(words: str) -> None:
        cluster.wait_facts(run, lambda f: any(words in q.reason for q in of_type(f, "RunQueued")),
                           timeout=90, what=f"RunQueued saying {words!r}")

    queued_for("gate drill: no DrillCompleted")
    status = wait(lambda: (lambda d: d if "gate drill" in d.stdout else None)(
        cluster.cli("status", run)), 60, "`runledger status` showing the gate")
    assert status.returncode == 0 and "runledger drill SPEC" in status.stdout

    # Unsigned, so not believed: were it, this pass would open the gate before the skip.
    send_request(cluster.bootstrap, drilled(digest, "kill_worker", "pass"), None)
    send_request(cluster.bootstrap, drilled(digest, "topology_change", "skip"), CAST.alice)
    queued_for("was skipped, none passed")
    facts = cluster.facts(run)
    assert not of_type(facts, "RunAdmitted")
    refused = [r for r in of_type(cluster.facts(spec_key(digest)), "WriteRejected")
               if r.rejected_event_type == "DrillCompleted"]
    assert [r.reason for r in refused] == ["unsigned"]

    send_request(cluster.bootstrap, drilled(digest, "kill_worker", "pass"), CAST.alice)
    cluster.wait_facts(run, lambda f: bool(of_type(f, "RunAdmitted")), timeout=90,
                       what="admission once a drill passed")
