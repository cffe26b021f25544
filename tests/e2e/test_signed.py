"""The controller signs what it writes: each run's facts a hash chain, each command signed.

Real processes on a private broker (tests/e2e/harness.py); the log is read
back raw and judged by ``events.signed.audit.verify``, as an auditor would, across a
``kill -9`` and restart of the controller.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import pytest

from events.model import CancelRequested, RunFinished, RunSubmitted
from events.signed.audit import BAD_SIGNATURE, LoggedRecord
from events.signed.keyring import UNSIGNED, WRONG_PRINCIPAL, check_headers
from events.signed.signing import REQUEST_SIG_HEADER, SigningKey, command_message, header_values
from events.topics import COMMANDS, REQUESTS
from tests.e2e.harness import Cluster, of_type, spec
from tests.e2e.signed import (
    CODEC,
    admin_key_id,
    audit,
    cancel_signed,
    raw_log,
    register_operator,
    submit_signed,
)
from tests.events.signed_log import CAST

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def test_a_run_across_a_controller_kill_verifies_and_an_altered_copy_fails_where_it_is(
    cluster: Cluster,
) -> None:
    first = cluster.controller(name="controller")
    cluster.agent("n1", 2)
    run, request = submit_signed(cluster, spec("signed", ["--steps", "30", "--step-time", "0.15"]),
                                 "alice", CAST.alice)
    cluster.wait_facts(run, lambda f: len(of_type(f, "StepCommitted")) >= 3,
                       what="generation 1 making progress")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    cluster.controller(name="controller-2")
    cluster.wait_facts(run, lambda f: any(isinstance(e, RunFinished) for e in f), timeout=90,
                       what="the run's end")
    runs = raw_log(cluster.bootstrap)
    mine = [r for r in runs if r.key == run.encode()]
    report = audit(cluster, {"alice": CAST.alice}, runs)
    assert report.ok, "\n".join(map(str, report.problems))
    assert report.anchor == admin_key_id(cluster)
    (verdict,) = [v for v in report.runs if v.run_id == run]
    assert verdict.records == len(mine) > 10

    # The submission is the operator's very bytes, with the operator's signature.
    (submitted,) = [r for r in mine if isinstance(CODEC.decode(r.value).event, RunSubmitted)]
    assert submitted.value == request and header_values(submitted.headers, REQUEST_SIG_HEADER)

    # Every command is signed by the controller's key.
    commands = [r for r in raw_log(cluster.bootstrap, COMMANDS) if r.key == run.encode()]
    assert commands
    for command in commands:
        assert check_headers(report.ring, command.headers, command_message(command.value),
                             principal="controller", role="controller") is None, command.where

    # One fact altered in a copy of the log: the audit names where it is.
    at = len(mine) // 2
    target = mine[at]
    event = CODEC.decode(target.value).event
    altered = CODEC.encode(replace(event, header=replace(
        event.header, occurred_at=event.header.occurred_at + 1)))
    copy = [LoggedRecord(r.topic, r.partition, r.offset, altered, r.headers, r.key)
            if r is target else r for r in runs]
    broken = audit(cluster, {"alice": CAST.alice}, copy)
    assert not broken.ok
    first_problem = broken.problems[0]
    assert (first_problem.where, first_problem.reason) == (target.where, BAD_SIGNATURE)



def test_cancel_authority_is_decided_on_the_verified_principal(cluster: Cluster) -> None:
    """By default: a cancel by a registered operator outside the cancel authority, one
    forged for another principal's name, and an unsigned one are each recorded as a
    WriteRejected with its reason; the authorised principal's cancels."""
    cluster.controller("ctl", "controller")
    cluster.agent("n1", 2)
    alice, mallory = SigningKey.generate(), SigningKey.generate()
    register_operator(cluster, "mallory", mallory)
    run, _ = submit_signed(cluster, spec("authority", ["--steps", "400", "--step-time", "0.1"]),
                           "alice", alice)
    cluster.wait_facts(run, lambda f: bool(of_type(f, "GenerationStarted")), what="admission")

    cancel_signed(cluster, run, "mallory", mallory)  # valid signature, no authority
    cancel_signed(cluster, run, "alice", mallory)    # mallory's key, alice's name
    cancel_signed(cluster, run, "oncall", None)      # in the authority, but unsigned
    facts = cluster.wait_facts(run, lambda f: len(of_type(f, "WriteRejected")) >= 3,
                               what="three refused cancels")
    reasons = [e.reason for e in of_type(facts, "WriteRejected")]
    assert reasons[:3] == ["unauthorized", WRONG_PRINCIPAL, UNSIGNED]
    assert not of_type(facts, "RunCancelled")

    cancel_signed(cluster, run, "alice", alice)  # the submitter may always cancel
    facts = cluster.wait_facts(run, lambda f: bool(of_type(f, "RunCancelled")),
                               what="the authorised cancel")
    (cancelled,) = of_type(facts, "RunCancelled")
    assert cancelled.principal == "alice"


def test_cancel_principal_oncall_by_any_operator_no_longer_cancels_as_oncall(
    cluster: Cluster,
) -> None:
    """Issue #33: the controller took unsigned requests on the broker's word, which vouches
    only for the role, so `runledger cancel RUN --principal oncall` by any operator
    cancelled a run whose cancel_authority is [oncall], recorded as oncall's act. On the
    default stack (no flag) the CLI signs with the operator's key and refuses to name
    oncall; the same request sent unsigned (as the old CLI did) or signed by the operator's
    key for oncall's name is recorded as a WriteRejected; oncall's own key cancels."""
    cluster.controller()
    cluster.agent("n1", 2)
    doc = spec("oncall", ["--steps", "400", "--step-time", "0.1"])
    assert doc["cancel_authority"] == ["oncall"]
    run = cluster.submit(doc)  # alice's
    cluster.wait_facts(run, lambda f: bool(of_type(f, "GenerationStarted")), what="admission")

    # The attack as written: an operator (the stack's operator key, RUNLEDGER_KEY) names
    # oncall. The CLI signs with its key, whose principal is not oncall: one line, no write.
    attack = cluster.cli("cancel", run, "--principal", "oncall", "--reason", "mine now")
    assert attack.returncode != 0 and attack.stdout == "", attack.stdout
    assert "--principal 'oncall' is not the principal" in attack.stderr, attack.stderr
    assert len(attack.stderr.strip().splitlines()) == 1, attack.stderr
    assert not [r for r in cluster.records(run, REQUESTS) if isinstance(r.event, CancelRequested)]

    # Around the CLI: unsigned, as the CLI wrote it before, then with the operator's own
    # (registered, valid) signature over oncall's name.
    assert cluster.keys is not None
    operator = SigningKey.load(cluster.keys / "operator.key")
    cancel_signed(cluster, run, "oncall", None)
    cancel_signed(cluster, run, "oncall", operator)
    facts = cluster.wait_facts(
        run, lambda f: len([e for e in of_type(f, "WriteRejected")
                            if e.rejected_event_type == "CancelRequested"]) >= 2,
        what="the two forged cancels refused")
    refused = [e.reason for e in of_type(facts, "WriteRejected")
               if e.rejected_event_type == "CancelRequested"]
    assert refused == [UNSIGNED, WRONG_PRINCIPAL]
    assert not of_type(facts, "RunCancelled")
    assert "WARNING --trust-unsigned" not in cluster.log_of("controller")

    # oncall, signing with the key registered to oncall, cancels: recorded as oncall's.
    done = cluster.cli("cancel", run, *cluster.signed_as("oncall"), "--reason", "budget")
    assert done.returncode == 0, done.stderr
    facts = cluster.wait_facts(run, lambda f: bool(of_type(f, "RunCancelled")),
                               what="oncall's signed cancel")
    (cancelled,) = of_type(facts, "RunCancelled")
    assert cancelled.principal == "oncall"


def test_trust_unsigned_takes_the_broker_word_and_says_so_loudly(cluster: Cluster) -> None:
    """Only an explicit --trust-unsigned takes an unsigned request (here one naming oncall,
    from operator credentials), and the controller warns of it as it starts."""
    cluster.controller("ctl", "controller", "--trust-unsigned")
    cluster.agent("n1", 2)
    run = cluster.submit(spec("trusting", ["--steps", "400", "--step-time", "0.1"]))
    cluster.wait_facts(run, lambda f: bool(of_type(f, "GenerationStarted")), what="admission")
    assert "WARNING --trust-unsigned: UNSIGNED" in cluster.log_of("controller")
    cancel_signed(cluster, run, "oncall", None)
    facts = cluster.wait_facts(run, lambda f: bool(of_type(f, "RunCancelled")),
                               what="the unsigned cancel taken")
    (cancelled,) = of_type(facts, "RunCancelled")
    assert cancelled.principal == "oncall"
