"""The signed log of a test cluster, read back raw and audited (``events.signed.audit.verify``).

A cluster's controllers sign with ``Cluster.controller_key``, which its
stack registered; the audit reads the cluster's own keys log (every fact names
its head, so no other keys log would do) with the stack's admin key pinned, the
operators a test names registered on it first. ``submit_signed`` writes a
``RunSubmitted`` request as a signed client would: its value bytes with the
operator's ``sign_request`` headers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import yaml

from controller.spec.runspec import parse_spec, run_id_for
from events.codec import default_codec
from events.kafka.clients import EventProducer, event_headers
from events.kafka.reader import LogReader
from events.model import CancelRequested, Header, RunSubmitted
from events.signed.audit import AuditReport, LoggedRecord, verify
from events.signed.signing import SigningKey, sign_request
from events.topics import KEYS, REQUESTS, RUNS
from tests.e2e.harness import Cluster

CODEC = default_codec()


def raw_log(bootstrap: str, topic: str = RUNS) -> list[LoggedRecord]:
    """Every record of ``topic`` as stored: value bytes and all headers, in log order."""
    reader = LogReader(bootstrap, [topic], raw=True, bounded=True, strict=True,
                       name=f"test-audit-{uuid.uuid4().hex[:8]}")
    try:
        return [LoggedRecord(r.topic, r.partition, r.offset, r.value, r.headers,
                             r.event.run_id.encode()) for r in reader.records()]
    finally:
        reader.close()


def admin_key_id(cluster: Cluster) -> str:
    """The trust anchor of the cluster's keys log: its stack's admin key."""
    assert cluster.keys is not None, "a secure cluster has an admin key"
    return SigningKey.load(cluster.keys / "admin.key").key_id


def audit(cluster: Cluster, operators: Mapping[str, SigningKey] | None = None,
          runs: list[LoggedRecord] | None = None) -> AuditReport:
    """The audit of the cluster's ``runs`` (or of ``runs``, a copy of it) by its keys log."""
    for name, key in (operators or {}).items():
        register_operator(cluster, name, key)
    records = runs if runs is not None else raw_log(cluster.bootstrap)
    return verify(raw_log(cluster.bootstrap, KEYS), records, trust=admin_key_id(cluster))


def register_operator(cluster: Cluster, principal: str, key: SigningKey) -> None:
    """Register ``key`` as ``principal``'s (role operator) on the cluster's keys log, as an
    admin does with docs/security.md's `runledger key register`; once per cluster."""
    if principal in cluster.registered:
        return
    assert cluster.keys is not None, "a secure cluster registers keys"
    done = cluster.cli("key", "register", principal, "--role", "operator",
                       "--public", key.public.raw.hex(),
                       "--admin-key", str(cluster.keys / "admin.key"))
    assert done.returncode == 0, done.stderr
    cluster.registered.add(principal)


def submit_signed(cluster: Cluster, doc: dict[str, Any], principal: str,
                  key: SigningKey, register: bool = True) -> tuple[str, bytes]:
    """Request the run of spec ``doc`` as ``principal``, signed; its run id and value bytes.

    The key is registered to ``principal`` first unless ``register`` is false."""
    if register:
        register_operator(cluster, principal, key)
    spec = parse_spec(yaml.safe_dump(doc), doc["name"])
    run_id = run_id_for(spec, principal, uuid.uuid4().hex)
    event = RunSubmitted(
        header=Header(f"{run_id}/submitted", run_id, 0, int(time.time() * 1000),
                      f"cli/{principal}"),
        spec_digest=spec.digest(), spec_json=spec.canonical_json(), principal=principal,
        world_size=spec.world_size, dataset_id=spec.dataset)
    value = CODEC.encode(event)
    version = CODEC.registry.latest(event.event_type).version
    producer = EventProducer(cluster.bootstrap, client_id="test-signed-submit")
    producer.send_bytes(REQUESTS, run_id, value,
                        [*event_headers(event, version), *sign_request(key, value)])
    producer.flush(30.0)
    return run_id, value


def cancel_signed(cluster: Cluster, run_id: str, principal: str,
                  key: SigningKey | None) -> None:
    """A ``CancelRequested`` claiming ``principal``, signed with ``key`` (None: unsigned),
    written by hand: the CLI itself refuses to sign for a name that is not its key's."""
    event = CancelRequested(
        header=Header(f"{run_id}/cancel/{uuid.uuid4().hex[:8]}", run_id, 0,
                      int(time.time() * 1000), f"cli/{principal}"),
        principal=principal, reason="test")
    value = CODEC.encode(event)
    version = CODEC.registry.latest(event.event_type).version
    producer = EventProducer(cluster.bootstrap, client_id="test-signed-cancel")
    signature = sign_request(key, value) if key is not None else []
    producer.send_bytes(REQUESTS, run_id, value, [*event_headers(event, version), *signature])
    producer.flush(30.0)
