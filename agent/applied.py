"""What an agent has applied, kept durably: one append-only, fsynced file per node.

An agent's memory of the commands it acted on (``agent.decide.AgentState``:
the ids seen, per run the newest generation commanded, stopped and started)
used to last one process. Its workers survive a ``kill -9`` of the agent (they
run in their own sessions), so a restarted agent that forgot would launch a
second group beside them for a genuine, signed start replayed byte for byte
(the signature and the fact log both still vouch for it). So the shell
(``agent.service``) appends one line per newly applied command *before* it
acts on it (write-ahead: a crash between the line and the launch loses the
launch, which the controller sees as members that never heartbeat, rather
than doubling it), and a restarted agent starts from :func:`restore` of the
file.

The file is ``<work dir>/.runledger-agent/applied.jsonl`` (:func:`path_for`;
directory 0700, file 0600), one JSON object a line: ``id`` (the command id),
``kind`` (``start`` or ``stop``), ``run``, ``generation`` and, for a start,
``started`` (whether the agent launched or rejected its members, as opposed
to a start with no member here). It grows by one line per command this node
applied (about 150 bytes).

:func:`entry` and :func:`restore` are pure; :class:`AppliedLog` does the I/O.
A last line cut short (the agent died mid-write) is dropped with a warning,
since its command was never acted on; any other unreadable line stops the
agent with the line named: guessing would risk launching a group twice.

Tested in tests/agent/test_applied.py.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from agent.decide import AgentConfig, AgentState
from agent.errors import AgentError
from events.model import Event, GroupStartCommanded, GroupStopCommanded

log = logging.getLogger("runledger.agent")

STATE_DIR = ".runledger-agent"
FILE_NAME = "applied.jsonl"
START, STOP = "start", "stop"


def path_for(work_dir: Path) -> Path:
    """The node's applied-commands file, under its agent's work directory."""
    return work_dir / STATE_DIR / FILE_NAME


def entry(before: AgentState, after: AgentState, command: Event) -> str | None:
    """The line recording ``command`` when deciding it marked it applied, else None."""
    if not isinstance(command, GroupStartCommanded | GroupStopCommanded):
        return None
    cid = command.command_id
    if cid in before.seen or cid not in after.seen:
        return None  # refused, ignored for another node, or deferred: nothing applied
    doc: dict[str, object] = {"id": cid, "run": command.run_id,
                              "generation": command.generation}
    if isinstance(command, GroupStartCommanded):
        doc["kind"] = START
        doc["started"] = (command.run_id, command.generation) in after.started
    else:
        doc["kind"] = STOP
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def restore(config: AgentConfig, lines: Sequence[str], where: str) -> AgentState:
    """The memory the lines leave (the newest ``seen_limit`` ids, every run's generations).

    ``lines`` are the file's lines without their newline; a last line cut short is
    the caller's to drop. Raises ``AgentError`` naming the line that is not an entry.
    """
    seen: list[str] = []
    newest: dict[str, int] = {}
    revoked: dict[str, int] = {}
    started: set[tuple[str, int]] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            cid, kind, run, gen = doc["id"], doc["kind"], doc["run"], int(doc["generation"])
            if not (isinstance(cid, str) and isinstance(run, str) and kind in (START, STOP)):
                raise ValueError("id and run must be strings, kind start or stop")
        except (ValueError, KeyError, TypeError) as exc:
            raise AgentError(
                f"{where} line {number} is not an applied-command entry ({exc}): the agent "
                "will not guess what it already did; restore the file, or move it aside "
                "only once no worker of this node is alive") from exc
        seen.append(cid)
        newest[run] = max(gen, newest.get(run, gen))
        if kind == STOP:
            revoked[run] = max(gen, revoked.get(run, gen))
        elif doc.get("started"):
            started.add((run, gen))
    return replace(AgentState(), seen=tuple(seen[-config.seen_limit:]), newest=newest,
                   revoked=revoked, started=frozenset(started))


class AppliedLog:
    """The file behind :func:`restore` and :func:`entry`: read once, then appended."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def at(cls, work_dir: Path, config: AgentConfig) -> tuple[AppliedLog, AgentState]:
        """The node's file under ``work_dir`` and the memory it holds: what a (re)started
        agent begins from."""
        applied = cls(path_for(work_dir))
        return applied, applied.load(config)

    def load(self, config: AgentConfig) -> AgentState:
        """The memory the file holds (empty when there is none yet)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return AgentState()
        except OSError as exc:
            raise AgentError(f"cannot read the applied-commands file {self.path}: {exc}; "
                             "the agent must know what it already did before it acts") from exc
        lines = text.split("\n")
        if lines[-1]:
            # No newline after it: the agent died writing it, before acting on it. Cut it
            # off, or the next entry would be glued to it.
            log.warning("%s: dropping a last line cut short (%d bytes): its command was "
                        "never acted on", self.path, len(lines[-1]))
            os.truncate(self.path, len(text.encode("utf-8")) - len(lines[-1].encode("utf-8")))
        state = restore(config, lines[:-1], str(self.path))
        log.info("applied-commands file %s: %d command ids, %d runs remembered",
                 self.path, len(state.seen), len(state.newest))
        return state

    def record(self, before: AgentState, after: AgentState, command: Event) -> None:
        """Append :func:`entry` of a decision, when it applied ``command``."""
        line = entry(before, after, command)
        if line is not None:
            self.append(line)

    def append(self, line: str) -> None:
        """Add one entry, on disk (fsynced) before the caller acts on its command.

        The file is opened per entry: commands are rare, and no descriptor outlives
        the write (nothing to close when the agent stops, or dies)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fresh = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            data = (line + "\n").encode("utf-8")
            if os.write(fd, data) != len(data):
                raise AgentError(f"short write to {self.path}; the command was not acted on")
            os.fsync(fd)
        finally:
            os.close(fd)
        if fresh:  # the new name itself must survive a crash
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
