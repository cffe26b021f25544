"""A signed run audited as a user would: ``key list``, ``submit --key``, ``audit verify``.

Real processes on a private secure broker whose ``stack up`` made and
registered its keys (tests/e2e/harness.py). The cluster's controller signs
with the stack's ``controller.key``, which ``stack up`` registered; the run is
submitted signed with the stack's ``operator.key``. When
it has finished, ``runledger audit verify`` passes every run of the log with
the stack's admin key pinned, and in an exported copy one flipped byte of a
fact is named by where it is.

The issue's attack (#33) on the same stack: a controller key registered and
then revoked (the keys log's last record) before the run; in an exported
copy the revocation's line is deleted and the run's end rewritten by a fact
that revoked key signs. ``audit verify --from`` fails with no outside state:
the copy's signed heads name the keys log's and the run's lost ends, and the
facts the controller signed after the revocation name the keys head that is
gone; the revocation deleted alone fails the same way. A revocation made while
the controller runs is named by the facts of the next request it takes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from events.codec import default_codec
from events.model import Header, RunFinished
from events.signed.audit import LoggedRecord
from events.signed.signing import (
    KEYS_HEAD_HEADER,
    SigningKey,
    key_digest,
    prev_of,
    sign_fact,
    signature_of,
)
from events.topics import KEYS
from runledger.logcopy import KEYS_FILE, RUNS_FILE, from_line, to_line
from tests.e2e.harness import Cluster, spec
from tests.e2e.signed import raw_log
from tests.events.signed_log import digest_of

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def test_a_signed_run_verifies_through_the_cli_and_a_flipped_byte_is_named(
        cluster: Cluster, tmp_path: Path) -> None:
    keys = tmp_path / "kafka" / "keys"  # the private stack's (tests/conftest.py)
    admin = SigningKey.load(keys / "admin.key")
    listed = cluster.cli("key", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert SigningKey.load(keys / "controller.key").key_id in listed.stdout
    cluster.controller()
    cluster.agent("n1", 2)  # enrolls node n1 on the keys log before it starts
    retired = SigningKey.generate()  # an old controller key, rotated out and revoked
    for step in (("key", "register", "retired", "--role", "controller", "--public",
                  retired.public.raw.hex(), "--admin-key", str(keys / "admin.key")),
                 ("key", "revoke", "retired", retired.key_id, "--admin-key",
                  str(keys / "admin.key"))):
        done = cluster.cli(*step)
        assert done.returncode == 0, done.stderr
    path = cluster.work / "audited.yaml"
    path.write_text(yaml.safe_dump(spec("audited", ["--steps", "8", "--step-time", "0.1"])))
    out = cluster.cli("submit", str(path), "--key", str(keys / "operator.key"), "--json")
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)["run_id"]
    cluster.wait_facts(run, lambda f: any(isinstance(e, RunFinished) for e in f), timeout=120,
                       what="the run's end")

    verdict = cluster.cli("audit", "verify", "--trust", admin.key_id)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    lines = verdict.stdout.splitlines()
    assert lines[0].startswith(f"trust anchor {admin.key_id} (admin's admin key)")
    [line] = [x for x in lines if x.startswith(f"run {run}: ")]
    assert line.startswith(f"run {run}: ok, ")

    copy = tmp_path / "copy"
    exported = cluster.cli("audit", "export", str(copy), "--key", str(keys / "operator.key"))
    assert exported.returncode == 0, exported.stderr
    assert cluster.cli("audit", "verify", "--from", str(copy)).returncode == 0
    _revocation_deleted(cluster, copy, tmp_path, run, retired, admin)
    lines = (copy / RUNS_FILE).read_text().splitlines()
    mine = [i for i, x in enumerate(lines) if from_line(x, "x").key == run.encode()]
    at = mine[len(mine) // 2]
    record = from_line(lines[at], "x")
    value = bytearray(record.value)
    value[-1] ^= 0x01
    lines[at] = to_line(type(record)(record.topic, record.partition, record.offset,
                                     bytes(value), record.headers, record.key))
    (copy / RUNS_FILE).write_text("\n".join(lines) + "\n")
    broken = cluster.cli("audit", "verify", run, "--from", str(copy))
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"run {run}: FAILED" in broken.stdout
    assert f"  {record.where} {run}: bad_signature (" in broken.stdout
    _a_revocation_while_it_runs_is_named_by_the_next_requests_facts(cluster, keys)


def _a_revocation_while_it_runs_is_named_by_the_next_requests_facts(
        cluster: Cluster, keys: Path) -> None:
    """The running controller reads the keys log again when a request arrives: the
    facts of the request that follows a revocation name the revocation as keys head."""
    later = SigningKey.generate()
    for step in (("key", "register", "later", "--role", "operator", "--public",
                  later.public.raw.hex(), "--admin-key", str(keys / "admin.key")),
                 ("key", "revoke", "later", later.key_id, "--admin-key",
                  str(keys / "admin.key"))):
        done = cluster.cli(*step)
        assert done.returncode == 0, done.stderr
    last = raw_log(cluster.bootstrap, KEYS)[-1]
    assert f"revoked/{later.key_id}".encode() in last.value
    found = signature_of(last.headers)
    assert isinstance(found, tuple)
    head = key_digest(last.value, found[1])
    path = cluster.work / "after.yaml"
    path.write_text(yaml.safe_dump(spec("after", ["--steps", "2", "--step-time", "0.1"])))
    out = cluster.cli("submit", str(path), "--key", str(keys / "operator.key"), "--json")
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)["run_id"]
    cluster.wait_facts(run, lambda f: len(f) >= 2, what="the second run's first facts")
    facts = [r for r in raw_log(cluster.bootstrap) if r.key == run.encode()]
    assert [prev_of(r.headers, KEYS_HEAD_HEADER) for r in facts[:2]] == [head, head]


def _revocation_deleted(cluster: Cluster, copy: Path, tmp_path: Path, run: str,
                        retired: SigningKey, admin: SigningKey) -> None:
    """The revocation's line deleted from a copy, alone and with the run's end rewritten."""
    keys = (copy / KEYS_FILE).read_text().splitlines()
    assert f"revoked/{retired.key_id}".encode() in from_line(keys[-1], "x").value
    runs = (copy / RUNS_FILE).read_text().splitlines()
    mine = [i for i, x in enumerate(runs) if from_line(x, "x").key == run.encode()]
    # The run's rewritten end: its genuine RunFinished and what follows cut, a failed
    # RunFinished chained onto what is left and signed by the revoked key.
    codec = default_codec()
    ends = [i for i in mine if isinstance(codec.decode(from_line(runs[i], "x").value).event,
                                          RunFinished)]
    kept = [runs[i] for i in mine if i < ends[0]]
    last = from_line(kept[-1], "x")
    end = codec.decode(from_line(runs[ends[0]], "x").value).event
    assert isinstance(end, RunFinished) and end.outcome == "succeeded"
    fake = RunFinished(header=Header(f"{run}/forged-end", run, end.generation,
                                     end.header.occurred_at, "controller"),
                       outcome="failed", reason="rewritten")
    value = codec.encode(fake)
    forged = to_line(LoggedRecord(last.topic, last.partition, 10**9, value,
                                  sign_fact(retired, digest_of(last), value,
                                            keys_head=_head_before(keys)), last.key))
    rewritten = [x for i, x in enumerate(runs) if i not in mine or i < ends[0]] + [forged]
    for name, new_runs in (("deleted", runs), ("rewritten", rewritten)):
        target = tmp_path / name
        target.mkdir()
        for file in copy.iterdir():
            (target / file.name).write_bytes(file.read_bytes())
        (target / KEYS_FILE).write_text("\n".join(keys[:-1]) + "\n")
        (target / RUNS_FILE).write_text("\n".join(new_runs) + "\n")
        for extra in ((), ("--trust", admin.key_id)):
            out = cluster.cli("audit", "verify", "--from", str(target), *extra)
            assert out.returncode == 1, (name, out.stdout, out.stderr)
            lines = out.stdout.splitlines()
            assert any(x.startswith("  runledger.keys@end: truncated (") for x in lines), name
            # Every fact signed since the revocation names the keys head that is gone.
            assert any(x.startswith("  ") and f" {run}: keys_head_missing (" in x
                       for x in lines), (name, out.stdout)
            if name == "rewritten":
                assert any(x.startswith("  runledger.runs@end") and f"{run}: truncated" in x
                           for x in lines), out.stdout


def _head_before(keys: list[str]) -> str:
    """The keys head before the revocation, as the forger names it: the digest of the
    record before the last (``events.signed.signing.key_digest`` of its value and signature)."""
    record = from_line(keys[-2], "x")
    found = signature_of(record.headers)
    assert isinstance(found, tuple)
    return key_digest(record.value, found[1])
