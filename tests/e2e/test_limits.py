"""One size limit, end to end, on a real broker with a real controller (issue #32 item 7).

A spec whose canonical JSON is exactly ``MAX_SPEC_BYTES`` is submitted through the
``runledger submit`` of docs/cli.md and decided: copied onto ``runledger.runs``, run and
finished; one byte more is refused by ``submit`` in one line and nothing is written.
A request written around ``submit`` whose signed copy cannot fit one record becomes
a ``WriteRejected`` (``too_large``) and the controller goes on deciding other runs,
never retrying a transaction the producer cannot send.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.spec.runspec import load_spec
from events.kafka.clients import EventProducer
from events.limits import MAX_SPEC_BYTES, RECORD_MAX_BYTES, TOO_LARGE, record_bytes
from events.model import Header, RunSubmitted
from events.signed.signing import SigningKey
from events.topics import REQUESTS
from runledger.signer import signed_record
from tests.e2e.harness import Cluster, of_type, spec
from tests.e2e.test_controller import finished

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def sized_spec(work: Path, name: str, json_bytes: int) -> dict[str, Any]:
    """A valid spec whose canonical JSON (what the request carries) is ``json_bytes`` long.

    The bulk is a cancel authority: the controller reads it, and no worker's
    environment carries it (``model`` would be, and one environment variable
    may hold at most 128 KiB)."""
    doc = spec(name, ["--steps", "3", "--step-time", "0.05"])
    doc["cancel_authority"] = ["oncall", "x"]
    path = work / f"{name}-probe.yaml"
    path.write_text(yaml.safe_dump(doc))
    pad = json_bytes - len(load_spec(path).canonical_json().encode())
    doc["cancel_authority"][1] = "x" * (1 + pad)
    return doc


def test_a_spec_at_the_limit_is_decided_and_one_byte_more_is_refused_at_submit(
    cluster: Cluster,
) -> None:
    cluster.controller()
    cluster.agent("n1", 2)
    inside = sized_spec(cluster.work, "inside", MAX_SPEC_BYTES)
    run = cluster.submit(inside)
    facts = cluster.wait_facts(run, finished("succeeded"), timeout=120, what="success")
    (copied,) = of_type(facts, "RunSubmitted")
    assert len(copied.spec_json.encode()) == MAX_SPEC_BYTES

    over = sized_spec(cluster.work, "over", MAX_SPEC_BYTES + 1)
    path = cluster.work / "over.yaml"
    path.write_text(yaml.safe_dump(over))
    done = cluster.cli("submit", str(path), *cluster.signed_as("alice"))
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    assert f"{TOO_LARGE}: the spec is {MAX_SPEC_BYTES + 1} bytes" in done.stderr
    assert f"the limit is {MAX_SPEC_BYTES} bytes" in done.stderr
    assert "transaction refused" not in cluster.log_of("controller")


def test_a_request_whose_copy_cannot_fit_is_refused_and_other_runs_are_decided(
    cluster: Cluster,
) -> None:
    cluster.controller()
    small = spec("small", ["--steps", "1"])
    path = cluster.work / "small.yaml"
    path.write_text(yaml.safe_dump(small))
    parsed = load_spec(path)
    run = "run-too-large-copy"
    # Written around `submit` (which refuses it): a request that fits one record
    # itself, signed by the stack's operator key (the controller refuses an unsigned
    # one first), but whose copy with the controller's signature headers cannot.
    assert cluster.keys is not None
    operator = SigningKey.load(cluster.keys / "operator.key")
    producer = EventProducer(cluster.bootstrap)
    pad = 0
    for _ in range(3):  # the padding's own length prefix may grow by a byte
        event = RunSubmitted(
            header=Header(event_id=f"{run}/submitted", run_id=run, generation=0,
                          occurred_at=1, producer="cli/" + "p" * pad),
            spec_digest=parsed.digest(), spec_json=parsed.canonical_json(),
            principal="operator", world_size=parsed.world_size, dataset_id=parsed.dataset)
        value, headers = signed_record(producer.codec, event, operator)
        size = record_bytes(run, len(value), headers)
        pad += RECORD_MAX_BYTES - 5 - size
    # Even an unsigned copy (a plaintext stack's controller signs nothing) adds its
    # writer header, 11 bytes here.
    assert RECORD_MAX_BYTES - 10 <= size <= RECORD_MAX_BYTES - 5
    producer.send_bytes(REQUESTS, run, value, headers)
    producer.flush()

    refused = cluster.wait_facts(run, lambda f: bool(of_type(f, "WriteRejected")),
                                 what="the refusal")
    (rejected,) = of_type(refused, "WriteRejected")
    assert rejected.reason == TOO_LARGE and rejected.rejected_event_type == "RunSubmitted"
    assert f"the limit is {RECORD_MAX_BYTES} bytes" in rejected.detail
    assert not of_type(refused, "RunSubmitted")
    # The controller moved on: a run submitted after it is copied and decided.
    after = cluster.submit(spec("after", ["--steps", "1"]))
    cluster.wait_facts(after, lambda f: bool(of_type(f, "RunSubmitted")), what="the next run")
    assert "transaction refused" not in cluster.log_of("controller")
