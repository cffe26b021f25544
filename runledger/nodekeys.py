"""Node keys: enrolling a node (its key file, registered as ``node.<name>``) and finding an agent's.

Each agent signs its reports with its own Ed25519 key, which an admin registers
on ``runledger.keys`` to the principal ``node.<name>`` with the role ``agent``
(``events.kafka.reportdoor``). :func:`enroll` is the operator's path (``runledger node
enroll NAME --admin-key admin.key``, with the admin's Kafka credentials, like
``key register``): it writes the key file (mode 0600, never overwritten) when
it is missing and registers its public key unless the log already has it, so
enrolling twice changes nothing; a key that the log revoked, or registers to
someone else, is refused with what to do.

:func:`agent_key` is what ``runledger agent`` signs with: ``--node-key FILE``,
checked against the keys log (a key that is not this node's live agent key
would have every report refused, so the agent refuses to start instead);
else, on the local stack ``runledger stack up`` started last (no
``--bootstrap``, no ``RUNLEDGER_BOOTSTRAP``) whose admin key and credentials
this user can read, the agent enrolls itself on first start, its key in
``<data dir>/keys/node.<name>.key``; else, on a cluster whose keys log has no
trust anchor (a plaintext stack), no key (reports go unsigned, as the
controller there takes them); else a one-line refusal naming the enroll step.

Tested in tests/runledger/commands/test_enroll.py.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from events.kafka.reportdoor import AGENT_ROLE, node_principal
from events.signed.keyring import KeyRing
from events.signed.signing import SigningKey
from runledger import config, current, keylog
from runledger.errors import UsageError
from runledger.signer import load_key

log = logging.getLogger("runledger.agent")

ADMIN_KEY = "keys/admin.key"  # runledger.stack.keys writes it at `stack up`
ADMIN_CREDENTIALS = "credentials/admin.properties"


def stack_key_file(data_dir: Path, node: str) -> Path:
    """Where a local stack keeps a node's key: beside the stack's own keys."""
    return data_dir / "keys" / f"{node_principal(node)}.key"


def enroll(bootstrap: str, node: str, key_file: Path, admin: SigningKey, *,
           credentials: str | None = None, by: str = "cli") -> tuple[SigningKey, str]:
    """The node's key (made in ``key_file`` if missing) registered live; and what was done."""
    made = not key_file.exists() and not key_file.is_symlink()
    if made:
        try:
            SigningKey.generate().save(key_file)
        except OSError as exc:
            raise UsageError(f"cannot write the node key {key_file} ({exc.strerror}); "
                             "choose another --out") from None
    key = load_key(key_file, "the node key")
    ring = keylog.load_ring(bootstrap, credentials=credentials, patience_s=config.retry_s()).ring
    if _live_for(ring, key, node):
        return key, f"key {key.key_id} of {node_principal(node)} in {key_file} already registered"
    event = keylog.registration(node_principal(node), AGENT_ROLE, key.public,
                                now_ms=time.time_ns() // 1_000_000, by=by,
                                reason=f"node {node} enrolled")
    written = keylog.append(bootstrap, ring, event, admin, credentials=credentials)
    return key, (f"{'made and ' if made else ''}registered key {key.key_id} of "
                 f"{node_principal(node)} ({AGENT_ROLE}) in {key_file} at {written.where}")


def _live_for(ring: KeyRing, key: SigningKey, node: str) -> bool:
    """Whether ``key`` is ``node``'s live agent key; False when the log lacks it; an
    error saying what to do when it is revoked or someone else's."""
    entry = ring.get(key.key_id)
    if entry is None:
        return False
    if entry.revoked_at is not None:
        raise UsageError(f"key {key.key_id} was revoked on runledger.keys; move its file away "
                         f"and enroll {node} again (a new key is made)")
    if entry.principal != node_principal(node) or entry.role != AGENT_ROLE:
        raise UsageError(f"key {key.key_id} is registered to {entry.principal!r} "
                         f"({entry.role}), not to {node_principal(node)!r} ({AGENT_ROLE}); "
                         f"give node {node} a key file of its own")
    return True


def agent_key(bootstrap: str, node: str, explicit: Path | None,
              bootstrap_option: str | None) -> SigningKey | None:
    """The key ``runledger agent --node NODE`` signs its reports with (module docstring)."""
    if explicit is not None:
        key = load_key(explicit, "--node-key")
        ring = keylog.load_ring(bootstrap, patience_s=config.retry_s()).ring
        if not _live_for(ring, key, node):
            raise UsageError(
                f"--node-key {explicit} (key {key.key_id}) is not registered on runledger.keys:"
                f" every report of this agent would be refused; an admin enrolls it: "
                f"runledger node enroll {node} --key {explicit} --admin-key ADMIN.key")
        return key
    stack = None if bootstrap_option or config.external_bootstrap() else current.recall(
        config.home(), "agent")
    if stack is not None and (stack.data_dir / ADMIN_KEY).is_file() \
            and (stack.data_dir / ADMIN_CREDENTIALS).is_file():
        admin = load_key(stack.data_dir / ADMIN_KEY, "the local stack's admin key")
        key, said = enroll(bootstrap, node, stack_key_file(stack.data_dir, node), admin,
                           credentials=str(stack.data_dir / ADMIN_CREDENTIALS),
                           by=f"agent/{node}")
        log.info("node key: %s", said)
        return key
    ring = keylog.load_ring(bootstrap, patience_s=config.retry_s()).ring
    if ring.anchor is None:
        log.warning("no node key and no trust anchor on runledger.keys (a plaintext "
                    "cluster): this agent's reports go out unsigned")
        return None
    raise UsageError(
        f"no node key for {node}: the controller believes only reports signed by "
        f"{node_principal(node)}'s key; an admin enrolls the node once "
        f"(runledger node enroll {node} --key {node}.key --admin-key ADMIN.key) and the "
        f"agent is started with --node-key {node}.key")
