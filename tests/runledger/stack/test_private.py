"""A stack's data directory is its owner's alone: 0700 directories, 0600 files.

Issue #33: Kafka's data directories were 0755 with 0644 segments, so any local
user read every topic and the SCRAM hashes past the ACLs. The slow test starts
a real secure stack with ``runledger stack up`` under the ordinary umask 022,
writes records and commits a consumer group's offsets, and walks everything the
broker and runledger wrote (segments, indexes, checkpoints, the metadata log,
credentials, keys, logs): nothing grants group or other any bit, while it runs,
after a clean stop, and after an older stack's widened files are brought back up.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from events.kafka.connection import client_config
from events.topics import RUNS
from runledger.errors import StackError
from runledger.stack.private import (
    claim,
    loose,
    open_private,
    private_dir,
    tighten,
    write_private,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_private_dirs_and_files_are_narrowed_whatever_existed(tmp_path: Path) -> None:
    wide = tmp_path / "wide"
    wide.mkdir(mode=0o755)
    os.chmod(wide, 0o755)
    assert private_dir(wide) == wide and mode(wide) == 0o700
    assert mode(private_dir(tmp_path / "new" / "dir")) == 0o700
    old = wide / "stack.json"
    old.write_text("old")
    os.chmod(old, 0o644)
    write_private(old, "new")
    assert (old.read_text(), mode(old)) == ("new", 0o600)
    with open_private(wide / "text") as handle:
        handle.write("x")
    assert mode(wide / "text") == 0o600


def test_tighten_takes_group_and_other_bits_off_everything_but_links(tmp_path: Path) -> None:
    root = tmp_path / "stack"
    segment = root / "node-1" / "data" / "runledger.runs-0" / "00000000000000000000.log"
    segment.parent.mkdir(parents=True)
    segment.write_bytes(b"records")
    for path in (root, *root.rglob("*")):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(segment, 0o4755)  # an odd bit of the owner's survives; only group/other go
    (root / "link").symlink_to("/etc/hostname")  # a link's mode means nothing
    assert set(loose(root)) == {root, *(p for p in root.rglob("*") if not p.is_symlink())}
    changed = tighten(root)
    assert set(changed) == {root, segment, *segment.parents[:3]}
    assert loose(root) == []
    assert mode(segment) == 0o4700 and mode(root) == 0o700
    assert mode(segment.parent) == 0o700
    assert tighten(root) == []  # nothing left to change


def test_claim_narrows_only_a_stacks_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"  # `--data-dir ~` by mistake: the user's own files
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    os.chmod(home / "notes.txt", 0o644)
    os.chmod(home, 0o755)
    with pytest.raises(StackError, match=r"holds notes.txt and no stack.json: not a stack's"
                                         r" data directory.*name a new or empty one"):
        claim(home, "stack.json")
    assert (mode(home), mode(home / "notes.txt")) == (0o755, 0o644)  # untouched

    assert mode(claim(tmp_path / "new", "stack.json")) == 0o700
    seeded = tmp_path / "seeded"  # credentials copied in before the first up (tests/stacks.py)
    (seeded / "credentials").mkdir(parents=True)
    os.chmod(seeded, 0o755)
    assert mode(claim(seeded, "stack.json")) == 0o700
    (home / "stack.json").write_text("{}")  # a stack's, whatever else lies beside it
    assert mode(claim(home, "stack.json")) == 0o700


def stack(*args: str) -> subprocess.CompletedProcess[str]:
    """``runledger stack ...`` as a user with the ordinary umask 022 runs it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RUNLEDGER_BOOTSTRAP", "RUNLEDGER_CREDENTIALS")}
    return subprocess.run([sys.executable, "-m", "runledger.cli", "stack", *args], env=env,
                          capture_output=True, text=True, timeout=240, check=False, umask=0o022)


def write_and_read(bootstrap: str, admin: Path) -> None:
    """Records on a topic and a consumer group's committed offsets: segments, indexes and
    __consumer_offsets on disk."""
    producer = Producer(client_config(bootstrap, credentials=admin))
    for i in range(5):
        producer.produce(RUNS, key=b"private", value=f"record {i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(client_config(bootstrap, {"group.id": "private-test",
                                                  "auto.offset.reset": "earliest",
                                                  "enable.auto.commit": False},
                                      credentials=admin))
    try:
        consumer.subscribe([RUNS])
        seen = 0
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen += 1
                if seen == 5:
                    break
        assert seen == 5
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def assert_owner_only(data_dir: Path) -> None:
    # Every segment, index, checkpoint and metadata file is in the walk, not a sample.
    assert any(data_dir.rglob("*.log")) and any(data_dir.rglob("*.index"))
    assert any(data_dir.rglob("__cluster_metadata-0/*")) and any(data_dir.rglob("*.properties"))
    assert mode(data_dir) == 0o700
    assert loose(data_dir) == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_stack_leaves_nothing_readable_by_group_or_others(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    up = stack("up", "--data-dir", str(data_dir), "--json")
    try:
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        write_and_read(info["bootstrap"], Path(info["credentials"]))
        assert_owner_only(data_dir)  # while it runs
        down = stack("down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stderr
        assert any(data_dir.rglob("*checkpoint*"))  # a clean stop writes its checkpoints
        assert_owner_only(data_dir)

        # A stack an older runledger made: 0755 directories, 0644 segments, stack.json and
        # logs (its credentials, keys and TLS files were already 0600; a secret found
        # readable stays refused, since it may have leaked). Brought up again, it is
        # narrowed, and the broker's new files are born 0600.
        secrets = [data_dir / name for name in ("credentials", "keys", "tls")]
        for path in (data_dir, *data_dir.rglob("*")):
            if not any(path == s or s in path.parents for s in secrets):
                os.chmod(path, mode(path) | (0o055 if path.is_dir() else 0o044))
        assert loose(data_dir)
        again = stack("up", "--data-dir", str(data_dir), "--json")
        assert again.returncode == 0, again.stderr
        assert_owner_only(data_dir)
    finally:
        stack("down", "--data-dir", str(data_dir), "--purge")
