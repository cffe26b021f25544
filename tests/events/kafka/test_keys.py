"""events/kafka/keys.py's RingReader on the session's (secure) broker: each read folds only
the key records appended since the last one, and gives the ring a whole read gives."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from events.kafka import keys
from events.kafka.keys import RingReader, read_ring
from events.record import Record
from events.signed.keyring import KeyRing
from tests.runledger.commands.test_enroll import admin_env, admin_key, cli

pytestmark = pytest.mark.kafka


def same(a: KeyRing, b: KeyRing) -> bool:
    return (dict(a.keys), a.anchor, a.head, a.records, set(a.heads)) == (
        dict(b.keys), b.anchor, b.head, b.records, set(b.heads))


def test_a_ring_reader_reads_on_from_where_it_stopped(
        bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folded: list[Record] = []
    real = keys._fold

    def counting(ring: KeyRing, record: Record) -> KeyRing:
        folded.append(record)
        return real(ring, record)

    monkeypatch.setattr(keys, "_fold", counting)
    reader = RingReader(bootstrap, name="test-ring")
    first = reader.read()
    assert first.records > 0 and len(folded) == first.records
    assert same(reader.read(), first) and len(folded) == first.records  # nothing new
    # `runledger node enroll NAME --admin-key FILE` (docs/cli.md) appends one key record.
    node = f"n-{uuid.uuid4().hex[:8]}"
    out = cli("node", "enroll", node, "--admin-key", admin_key(), "--key",
              str(tmp_path / "n.key"), "--json", env=admin_env())
    assert out.returncode == 0, out.stderr
    folded.clear()
    second = reader.read()
    assert len(folded) >= 1 and second.records == first.records + len(folded)
    assert any(e.principal == f"node.{node}" for e in second.keys.values())
    assert same(second, read_ring(bootstrap, name="test-ring-whole"))
