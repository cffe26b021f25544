"""Signed ``runledger submit`` and ``cancel``, as an operator runs them, on the session's broker.

The CLI runs with the operator's Kafka credentials and the stack's
``operator.key`` (``--key`` or ``RUNLEDGER_KEY``): the request on
``runledger.requests`` carries a signature over its exact value bytes that the
key ring of ``runledger.keys`` accepts for the principal the event names, the
key's. A ``--principal`` naming someone else, a key nobody registered, a
revoked key or a controller's key is refused in one line and nothing is
written. Without a key named, the remembered local stack's ``operator.key``
signs; with none at all the command is refused in one line, since the
controller refuses unsigned requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from events.codec import default_codec
from events.kafka.connection import ENV_CREDENTIALS
from events.limits import MAX_REQUEST_BYTES
from events.model import CancelRequested, Event, Header, ResumeRequested, RunSubmitted
from events.signed.audit import LoggedRecord
from events.signed.keyring import check_headers
from events.signed.signing import SigningKey, request_message
from events.topics import REQUESTS
from runledger import current, keylog
from runledger.rawlog import read_raw
from runledger.signer import ENV_KEY, RequestTooLarge, send_request
from tests.runledger.commands.test_runs import end_offsets, spec_file


def stack_dir() -> Path:
    return Path(os.environ[ENV_CREDENTIALS]).parent.parent


def operator_env(**extra: str) -> dict[str, str]:
    """The operator's credentials, and no key unless ``extra`` names one."""
    creds = stack_dir() / "credentials" / "operator.properties"
    env = {k: v for k, v in os.environ.items() if k != ENV_KEY}
    return {**env, ENV_CREDENTIALS: str(creds), "USER": "alice", **extra}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args], capture_output=True,
                          text=True, timeout=120, env=env or operator_env(), check=False)


def refused(out: subprocess.CompletedProcess[str], needle: str) -> None:
    assert out.returncode in (1, 2), (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and out.stdout == ""
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("runledger: ") and needle in line, line


def request_of(bootstrap: str, run_id: str, event_type: type) -> tuple[Event, LoggedRecord]:
    """The run's request of ``event_type`` on the log, decoded, and the record as stored."""
    codec = default_codec()
    for record in read_raw(bootstrap, [REQUESTS], patience_s=20)[REQUESTS]:
        if record.key == run_id.encode():
            event = codec.decode(record.value).event
            if isinstance(event, event_type):
                return event, record
    raise AssertionError(f"no {event_type.__name__} of {run_id} on {REQUESTS}")


def judge(bootstrap: str, record: LoggedRecord, principal: str) -> str | None:
    ring = keylog.load_ring(bootstrap).ring
    return check_headers(ring, record.headers, request_message(record.value),
                         principal=principal, role="operator")


@pytest.mark.kafka
def test_a_signed_submit_and_cancel_carry_the_operators_signature(
        bootstrap: str, unique: str, tmp_path: Path) -> None:
    key = stack_dir() / "keys" / "operator.key"
    out = cli("submit", str(spec_file(tmp_path, unique)), "--key", str(key), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["principal"] == "operator"
    assert doc["key_id"] == SigningKey.load(key).key_id
    event, record = request_of(bootstrap, doc["run_id"], RunSubmitted)
    assert isinstance(event, RunSubmitted) and event.principal == "operator"
    assert event.header.producer == "cli/operator"
    assert judge(bootstrap, record, "operator") is None
    assert judge(bootstrap, record, "alice") == "wrong_principal"

    out = cli("cancel", doc["run_id"], "--reason", "done", "--principal", "operator", "--json",
              env=operator_env(RUNLEDGER_KEY=str(key)))
    assert out.returncode == 0, out.stderr
    cancel, record = request_of(bootstrap, doc["run_id"], CancelRequested)
    assert isinstance(cancel, CancelRequested) and cancel.principal == "operator"
    assert judge(bootstrap, record, "operator") is None


@pytest.mark.kafka
def test_without_a_key_a_request_is_refused_in_one_line_saying_where_keys_come_from(
        bootstrap: str, unique: str, tmp_path: Path) -> None:
    """The controller refuses unsigned requests, so no command sends one: with no --key,
    no RUNLEDGER_KEY and another cluster named (RUNLEDGER_BOOTSTRAP), each says so."""
    before = end_offsets(bootstrap, REQUESTS)
    for args in (["submit", str(spec_file(tmp_path, unique))],
                 ["cancel", "some-run", "--reason", "x"],
                 ["resume", "some-run", "--reason", "x"],
                 ["node", "cordon", "some-node", "--reason", "x"]):
        out = cli(*args)
        refused(out, "no key to sign the request with")
        assert all(w in out.stderr for w in ("--key FILE", "RUNLEDGER_KEY", "operator.key"))
    assert end_offsets(bootstrap, REQUESTS) == before


@pytest.mark.kafka
def test_on_the_remembered_local_stack_requests_sign_with_its_operator_key(
        bootstrap: str, unique: str, tmp_path: Path) -> None:
    """As a user of `runledger stack up` runs them: no --key, no RUNLEDGER_KEY, no
    RUNLEDGER_BOOTSTRAP; submit, cancel and resume sign with <data dir>/keys/operator.key."""
    home = tmp_path / "home"
    current.remember(home, stack_dir())
    env = {k: v for k, v in os.environ.items()
           if k not in ("RUNLEDGER_BOOTSTRAP", ENV_CREDENTIALS, ENV_KEY)}
    env["RUNLEDGER_HOME"] = str(home)
    out = cli("submit", str(spec_file(tmp_path, unique)), "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    key = SigningKey.load(stack_dir() / "keys" / "operator.key")
    assert (doc["principal"], doc["key_id"]) == ("operator", key.key_id)
    _, record = request_of(bootstrap, doc["run_id"], RunSubmitted)
    assert judge(bootstrap, record, "operator") is None
    for verb, kind in (("cancel", CancelRequested), ("resume", ResumeRequested)):
        out = cli(verb, doc["run_id"], "--reason", "mine", "--json", env=env)
        assert out.returncode == 0, out.stderr
        event, record = request_of(bootstrap, doc["run_id"], kind)
        assert event.principal == "operator" and judge(bootstrap, record, "operator") is None


@pytest.mark.kafka
def test_a_key_that_may_not_sign_this_request_is_refused_and_nothing_is_written(
        bootstrap: str, unique: str, tmp_path: Path) -> None:
    keys, spec = stack_dir() / "keys", str(spec_file(tmp_path, unique))
    admin = SigningKey.load(keys / "admin.key")
    stranger = tmp_path / "stranger.key"
    SigningKey.generate().save(stranger)
    revoked = SigningKey.generate()
    revoked.save(tmp_path / "revoked.key")
    ring = keylog.load_ring(bootstrap).ring
    principal = f"gone-{unique[-8:]}"
    for event in (keylog.registration(principal, "operator", revoked.public, now_ms=1,
                                      by="test", reason="t"),
                  keylog.revocation(principal, revoked.key_id, now_ms=2, by="test",
                                    reason="t")):
        ring = keylog.append(bootstrap, ring, event, admin).ring
    before = end_offsets(bootstrap, REQUESTS)
    refused(cli("submit", spec, "--key", str(keys / "operator.key"), "--principal", "bob"),
            "--principal 'bob' is not the principal key")
    refused(cli("submit", spec, "--key", str(stranger)), "is not registered on runledger.keys")
    refused(cli("submit", spec, "--key", str(tmp_path / "revoked.key")), "was revoked")
    refused(cli("submit", spec, "--key", str(keys / "controller.key")),
            "is controller's controller key")
    refused(cli("submit", spec, env=operator_env(RUNLEDGER_KEY=str(tmp_path / "none.key"))),
            "no such file")
    refused(cli("cancel", "some-run", "--reason", "x", "--key", str(stranger)),
            "is not registered")
    assert end_offsets(bootstrap, REQUESTS) == before


def test_a_request_too_large_to_copy_is_refused_before_any_broker_is_asked() -> None:
    """``send_request`` measures the record it would send, signature headers included:
    over ``MAX_REQUEST_BYTES`` it is refused in one line, and nothing is sent."""
    run = "run-too-large"
    event = RunSubmitted(
        header=Header(event_id=f"{run}/submitted", run_id=run, generation=0, occurred_at=1,
                      producer="cli/alice"),
        spec_digest="sha256:" + "0" * 64, spec_json="x" * MAX_REQUEST_BYTES,
        principal="alice", world_size=1)
    for key in (None, SigningKey.generate()):
        with pytest.raises(RequestTooLarge) as refused:
            send_request("127.0.0.1:1", event, key)
        message = str(refused.value)
        assert "\n" not in message and message.startswith(
            f"RunSubmitted of {run} was not sent: too_large: the request is ")
        assert f"the limit is {MAX_REQUEST_BYTES} bytes" in message
