"""``runledger audit verify|export`` as a user runs them: subprocesses, the session's secure broker.

Facts are not signed by the controller yet, so the log under test is one built
signed here (``tests/events/signed_log.py``: real keys, the real codec, facts
the fold accepts) and written raw to a real topic pair that ``--keys-topic``
and ``--runs-topic`` name. A forged fact appended on the broker is named; an
exported copy verifies with no broker at all, and a byte flipped, a record
removed, a forged record inserted or a run's last fact cut in that copy is
named by where it is and why; a run's last fact cut from the copy is found by
the copy's signed heads alone. The issue's attack (#33): a revoked controller
key signs a run's rewritten end and the revocation's line is deleted from an
exported copy's keys log, from its middle or its end: verify fails naming it,
with and without ``--trust`` and ``--heads``. The stack's own keys log
verifies as anchored by its admin key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from events.kafka.connection import ENV_CREDENTIALS
from events.signed.audit import LoggedRecord
from events.signed.signing import GENESIS, SigningKey, sign_fact
from runledger.logcopy import KEYS_FILE, RUNS_FILE, from_line, to_line
from tests.events.builders import Ev
from tests.events.signed_log import CAST, CODEC, START, digest_of, rotated_story, story
from tests.runledger.signed_topics import topic_pair, write

NO_BROKER = {"RUNLEDGER_BOOTSTRAP": "127.0.0.1:1", "RUNLEDGER_RETRY_S": "0"}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runledger.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})}, check=False)


def one_line_error(out: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert out.returncode == code, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("runledger: ") and needle in line, line


def key_file(folder: Path, key: SigningKey = CAST.alice) -> str:
    """``key`` saved where an exporter keeps it: the copy's heads are signed with it."""
    path = folder / f"{key.key_id}.key"
    if not path.exists():
        key.save(path)
    return str(path)


class Log:
    """The story's signed log on a real topic pair."""

    def __init__(self, bootstrap: str, unique: str, built: tuple[Any, Any] | None = None) -> None:
        self.keys_topic, self.runs_topic = topic_pair(bootstrap, unique)
        keys, runs = built or story()
        self.keys = write(bootstrap, self.keys_topic, keys.records)
        self.runs = write(bootstrap, self.runs_topic, runs.records)
        self.topics = ("--keys-topic", self.keys_topic, "--runs-topic", self.runs_topic)

    def of(self, run: str) -> list[LoggedRecord]:
        return [r for r in self.runs if r.key == run.encode()]


@pytest.fixture
def log(bootstrap: str, unique: str) -> Log:
    return Log(bootstrap, unique)


def forged(run: str, prev: LoggedRecord, partition: int, offset: int, topic: str) -> LoggedRecord:
    """A fact of ``run`` chained onto ``prev`` and signed by a key nobody registered."""
    event = Ev(run, start=START + 90_000, producer="controller").step(1, 9)
    value = CODEC.encode(event)
    headers = sign_fact(CAST.stranger, digest_of(prev), value, keys_head=GENESIS)
    return LoggedRecord(topic, partition, offset, value, headers, run.encode())


@pytest.mark.kafka
def test_a_sound_signed_log_verifies_with_one_ok_line_per_run(log: Log) -> None:
    out = cli("audit", "verify", *log.topics, "--trust", CAST.admin.key_id)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"trust anchor {CAST.admin.key_id} (root's admin key)")
    assert lines[0].endswith("pinned by --trust")
    assert lines[1] == f"keys ok: {len(log.keys)} records, 5 keys"
    assert any(line.startswith(f"run r1: ok, {len(log.of('r1'))} facts, head ") for line in lines)
    assert any(line.startswith("run r2: ok, ") for line in lines)

    only = cli("audit", "verify", "r2", *log.topics, "--json")
    assert only.returncode == 0, only.stderr
    doc = json.loads(only.stdout)
    assert doc["ok"] is True and doc["anchor"] == CAST.admin.key_id
    assert [r["run_id"] for r in doc["runs"]] == ["r2"]
    assert doc["runs"][0]["head"] == digest_of(log.of("r2")[-1])

    one_line_error(cli("audit", "verify", "nope", *log.topics), 1, "run 'nope' has no facts")


@pytest.mark.kafka
def test_a_forged_fact_on_the_broker_is_named_and_fails(log: Log, bootstrap: str) -> None:
    last = log.of("r1")[-1]
    offset = max(r.offset for r in log.runs if r.partition == last.partition) + 1
    [fake] = write(bootstrap, log.runs_topic,
                   [forged("r1", last, last.partition, offset, log.runs_topic)])
    out = cli("audit", "verify", *log.topics)
    one_line_error(out, 1, "the log does not verify: 1 problem in 1 of ")
    assert "run r1: FAILED, " in out.stdout and "run r2: ok" in out.stdout
    assert (f"  {fake.where} r1: unknown_key (signed by {CAST.stranger.key_id})"
            in out.stdout.splitlines())


@pytest.mark.kafka
def test_a_pinned_anchor_that_is_not_the_logs_fails(log: Log) -> None:
    other = SigningKey.generate().key_id
    out = cli("audit", "verify", *log.topics, "--trust", other)
    one_line_error(out, 1, "the log does not verify")
    assert f"untrusted_anchor (the anchor is {CAST.admin.key_id}, the pinned one {other})" \
        in out.stdout
    one_line_error(cli("audit", "verify", *log.topics, "--trust", "admin"), 2,
                   "--trust 'admin' is not a key id")


def _edit(copy: Path, target: Path, change: object, name: str = RUNS_FILE) -> None:
    shutil.copytree(copy, target)
    path = target / name
    lines = path.read_text().splitlines()
    assert callable(change)
    change(lines)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.kafka
def test_an_exported_copy_verifies_offline_and_names_each_tampering(
        log: Log, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    out = cli("audit", "export", str(copy), *log.topics, "--key", key_file(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (f"exported {len(log.keys)} key records and {len(log.runs)} "
                                  f"facts to {copy}, their heads signed by {CAST.alice.key_id}")
    report = cli("audit", "verify", "--from", str(copy), "--json", env=NO_BROKER)
    assert report.returncode == 0, report.stderr
    again = cli("audit", "export", str(tmp_path / "again"), *log.topics, "--key",
                key_file(tmp_path), "--json")
    assert json.loads(again.stdout) == {
        "directory": str(tmp_path / "again"), "key_records": len(log.keys),
        "facts": len(log.runs), "heads_signed_by": CAST.alice.key_id}
    (tmp_path / "report.json").write_text(report.stdout)
    lines = (copy / RUNS_FILE).read_text().splitlines()
    index = {from_line(line, "x").where: i for i, line in enumerate(lines)}
    r1 = log.of("r1")

    def flip(lines: list[str]) -> None:
        record = from_line(lines[index[r1[3].where]], "x")
        value = bytearray(record.value)
        value[len(value) // 2] ^= 0x20
        lines[index[r1[3].where]] = to_line(LoggedRecord(
            record.topic, record.partition, record.offset, bytes(value), record.headers,
            record.key))

    def remove(lines: list[str]) -> None:
        del lines[index[r1[2].where]]

    fake = forged("r1", r1[4], r1[4].partition, 999, log.runs_topic)

    def insert(lines: list[str]) -> None:
        lines.insert(index[r1[4].where] + 1, to_line(fake))

    def cut(lines: list[str]) -> None:
        del lines[index[r1[-1].where]]

    heads = ("--heads", str(tmp_path / "report.json"))
    for name, change, extra, where, reason in [
        ("flipped", flip, (), r1[3].where, "bad_signature"),
        ("removed", remove, (), r1[3].where, "broken_chain"),
        ("forged", insert, (), fake.where, "unknown_key"),
        ("cut", cut, heads, "runledger.runs@end", "truncated"),  # past the last record
        ("cut-alone", cut, (), "runledger.runs@end", "truncated"),  # the copy's own heads
    ]:
        _edit(copy, tmp_path / name, change)
        out = cli("audit", "verify", "--from", str(tmp_path / name), *extra, env=NO_BROKER)
        one_line_error(out, 1, "the log does not verify")
        assert "run r1: FAILED" in out.stdout and "run r2: ok" in out.stdout, name
        assert any(line.startswith(f"  {where} r1: {reason} (")
                   for line in out.stdout.splitlines()), (name, out.stdout)


@pytest.mark.kafka
def test_what_is_no_copy_and_a_used_directory_are_one_line_errors(
        log: Log, tmp_path: Path) -> None:
    one_line_error(cli("audit", "verify", "--from", str(tmp_path), env=NO_BROKER), 1,
                   "manifest.json is missing")
    (tmp_path / "mine.txt").write_text("keep")
    one_line_error(cli("audit", "export", str(tmp_path), *log.topics, "--key",
                       key_file(tmp_path)), 2, "is not an empty directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["mine.txt", f"{CAST.alice.key_id}.key"])


@pytest.mark.kafka
def test_an_export_signs_with_a_live_key_of_the_log_or_writes_nothing(
        log: Log, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    for key, code, needle in ((CAST.stranger, 1, f"key {CAST.stranger.key_id} is no live key"),
                              (None, 2, "audit export signs the heads of what it copies")):
        args = ("--key", key_file(keys, key)) if key is not None else ()
        out = cli("audit", "export", str(tmp_path / "copy"), *log.topics, *args,
                  env={"RUNLEDGER_KEY": ""} if key is None else None)
        one_line_error(out, code, needle)
        assert not (tmp_path / "copy").exists()


@pytest.mark.kafka
@pytest.mark.parametrize("trailing", [False, True], ids=["middle", "trailing"])
def test_a_revocation_deleted_from_an_exported_copy_fails_with_or_without_trust_and_heads(
        bootstrap: str, unique: str, tmp_path: Path, trailing: bool) -> None:
    built = rotated_story(trailing)
    log = Log(bootstrap, unique, (built.keys, built.runs))
    # On the broker, whole: the rewritten end is signed by a revoked key.
    forged = log.runs[built.runs.records.index(built.forged)]
    live = cli("audit", "verify", *log.topics, "--trust", CAST.admin.key_id)
    one_line_error(live, 1, "the log does not verify")
    assert f"  {forged.where} r1: revoked_key (signed by " in live.stdout

    copy = tmp_path / "copy"
    assert cli("audit", "export", str(copy), *log.topics, "--key",
               key_file(tmp_path)).returncode == 0
    report = cli("audit", "verify", "--from", str(copy), "--json", env=NO_BROKER)
    (tmp_path / "report.json").write_text(report.stdout)
    revocation = log.keys[built.keys.records.index(built.revocation)]
    after = [log.runs[built.runs.records.index(r)].where for r in built.after]

    def delete(lines: list[str]) -> None:
        [at] = [i for i, x in enumerate(lines) if from_line(x, "x").where == revocation.where]
        del lines[at]

    _edit(copy, tmp_path / "deleted", delete, KEYS_FILE)
    for extra in ((), ("--trust", CAST.admin.key_id),
                  ("--trust", CAST.admin.key_id, "--heads", str(tmp_path / "report.json"))):
        out = cli("audit", "verify", "--from", str(tmp_path / "deleted"), *extra, env=NO_BROKER)
        one_line_error(out, 1, "the log does not verify")
        assert "keys FAILED" in out.stdout, out.stdout
        if trailing:
            # The copy's signed heads name the keys log's lost end, and every fact the
            # controller signed after the revocation names the keys head that is gone.
            assert "  runledger.keys@end: truncated (" in out.stdout
            for where in after:
                assert any(line.startswith(f"  {where} ") and "keys_head_missing" in line
                           for line in out.stdout.splitlines()), (where, out.stdout)
        else:
            # The next key record's link names the deleted one.
            nxt = log.keys[built.keys.records.index(built.revocation) + 1]
            assert f"  {nxt.where} key/carol: broken_chain (" in out.stdout, out.stdout


@pytest.mark.kafka
def test_the_stacks_own_keys_log_is_anchored_by_its_admin_key(bootstrap: str) -> None:
    keys = Path(os.environ[ENV_CREDENTIALS]).parent.parent / "keys"
    admin = SigningKey.load(keys / "admin.key")
    out = cli("audit", "verify", "--json", "--trust", admin.key_id)
    # Facts are unsigned until the controller signs them: only the keys log is judged here.
    doc = json.loads(out.stdout)
    assert doc["anchor"] == admin.key_id and doc["keys"]["problems"] == []
