"""Private brokers for tests that must stop or own one: as secure as the session's.

``make test`` runs against a secure stack and exports ``RUNLEDGER_CREDENTIALS``
(its admin). A test's private stack gets a copy of the same credential files
before its first ``up`` (a stack keeps credential files it finds), so every
client in the test, which reads the environment, authenticates to either
broker. Without session credentials a private stack is plaintext, like the
session's.

Every reader believes a worker's report only under its run's key, certified by
an enrolled node (``events.kafka.runkeys``), so a test that writes reports itself
sends them as a worker does (:func:`send_report`). The controller refuses
unsigned requests, so a test's CLI signs as a user's does: with the session
stack's ``keys/operator.key`` (:func:`session_key`, passed as
``RUNLEDGER_KEY``), or as another principal with a key the session's admin
registered to it (:func:`registered_key`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from events.kafka import runkeys
from events.kafka.clients import EventProducer
from events.kafka.connection import ENV_CREDENTIALS
from events.model import Event
from events.signed.signing import SigningKey
from runledger import keylog, nodekeys
from runledger.stack import Stack

# This process's node keys, by (broker, node), and its run keys, by (broker, run,
# generation, node): a private stack has a keys log of its own.
_NODE_KEYS: dict[tuple[str, str], SigningKey] = {}
_RUN_KEYS: dict[tuple[str, str, int, str], runkeys.RunKey] = {}
# The data dirs of this process's private stacks, where their admin keys are.
_PRIVATE_DIRS: list[Path] = []


def session_credentials() -> Path | None:
    raw = os.environ.get(ENV_CREDENTIALS, "")
    return Path(raw) if raw else None


def private_stack(data_dir: Path, brokers: int = 1) -> Stack:
    """A stack in ``data_dir`` whose principals and passwords are the session's."""
    creds = session_credentials()
    if creds is not None:
        target = data_dir / "credentials"
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        for source in creds.parent.glob("*.properties"):
            shutil.copy2(source, target / source.name)
    _PRIVATE_DIRS.append(data_dir)
    return Stack(data_dir, brokers=brokers, secure=creds is not None)


def session_key(name: str = "operator") -> Path | None:
    """The session stack's key file of ``name`` (``keys/<name>.key`` beside the
    credentials directory), when the session is a secure stack."""
    creds = session_credentials()
    return creds.parent.parent / "keys" / f"{name}.key" if creds is not None else None


def registered_key(bootstrap: str, principal: str, folder: Path) -> Path:
    """A new key file in ``folder`` registered to ``principal`` (role operator) on the
    session's keys log by its admin key, as `runledger key register` does."""
    admin = session_key("admin")
    assert admin is not None, "a secure session registers keys"
    key = SigningKey.generate()
    path = folder / f"{principal}.key"
    key.save(path)
    ring = keylog.load_ring(bootstrap).ring
    keylog.append(bootstrap, ring, keylog.registration(
        principal, "operator", key.public, now_ms=1, by="test", reason="a test's operator"),
        SigningKey.load(admin))
    return path


def send_report(bootstrap: str, producer: EventProducer, event: Event,
                node: str = "n1") -> None:
    """Queue a worker's report as a worker does: signed with a run key for its run and
    generation, certified by the key of its node (the event's ``node``, else ``node``),
    which the admin of the stack at ``bootstrap`` (the session's or a private one's)
    enrolls once per process. Unsigned on a plaintext session."""
    if session_key("admin") is None:
        runkeys.send_report(producer, event, None)
        return
    node = getattr(event, "node", None) or node
    node_key = _NODE_KEYS.get((bootstrap, node))
    if node_key is None:
        folder = Path(tempfile.mkdtemp(prefix="runledger-test-node-"))
        node_key, _ = nodekeys.enroll(bootstrap, node, folder / f"node.{node}.key",
                                      _admin_of(bootstrap), by="test")
        _NODE_KEYS[(bootstrap, node)] = node_key
    at = (event.run_id, event.header.generation, node)
    run_key = _RUN_KEYS.get((bootstrap, *at))
    if run_key is None:
        run_key = _RUN_KEYS[(bootstrap, *at)] = runkeys.RunKey.issue(node_key, *at)
    runkeys.send_report(producer, event, run_key)


def _admin_of(bootstrap: str) -> SigningKey:
    """The admin key whose registration anchors the keys log at ``bootstrap``: the
    session stack's or one of this process's private stacks'."""
    anchor = keylog.load_ring(bootstrap).ring.anchor
    admin = session_key("admin")
    candidates = [admin] if admin is not None else []
    candidates += [d / "keys" / "admin.key" for d in reversed(_PRIVATE_DIRS)]
    for path in candidates:
        if path.is_file() and (key := SigningKey.load(path)).key_id == anchor:
            return key
    raise AssertionError(f"no admin key of this test process anchors {bootstrap}'s keys log")
