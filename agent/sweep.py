"""Staging residue of a stopped generation, removed by the agent once its workers exited.

A checkpoint is written under ``<root>/<run>/g<generation>/step-<step>/`` with
its ``manifest.json`` last (``worker.layout``, ``worker.commit``), and the log
can commit it only after that. The controller stops a generation only in the
step that revokes it (a restart decision, a replacement, the run's end:
``controller.run_decide``, ``controller.inputs``, ``controller.guard``), so a
``GroupStopCommanded`` for generation G means nothing of G or older can be
committed any more. Once this node's workers of those generations have exited,
the agent removes every step directory of generation <= G under the run's
first checkpoint tier that has no ``manifest.json``: shards of a checkpoint cut
short by the stop, that no commit can vouch for and that restore never reads.

Rules (pure: :func:`due`, :func:`plan`):

1. a sweep is registered for a stop this agent acted on, and only for a run
   it launched workers of (it knows the root from their start command);
2. it is due once no worker of that run of generation <= G runs on this node,
   so every file this node's workers wrote is already there to be removed;
3. it removes at most ``LIMIT`` directories of generation <= G lacking
   ``manifest.json``, oldest first; a directory holding its manifest is left
   to the log-aware collection (``worker.gc``, ``runledger checkpoint gc``), and
   other tiers are never touched (they hold copies of committed checkpoints,
   made by newer generations too).

Agents sharing the storage may sweep the same directory: removing what is gone
is fine. Limits: an agent restarted after launching the workers knows no root
and sweeps nothing; what remains is what ``runledger.rehearse.terminalcheck`` reports
as residue.

Tested in tests/agent/test_sweep.py.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping

from agent.decide import WorkerKey

log = logging.getLogger(__name__)

LIMIT = 64
MANIFEST = "manifest.json"  # worker.layout.MANIFEST: the agent may not import worker
_GEN_DIR = re.compile(r"^g(\d{6})$")  # worker.layout's names; tests/agent checks they agree
_STEP_DIR = re.compile(r"^step-(\d{10})$")

Entry = tuple[str, str, bool]  # (generation dir, step dir, holds manifest.json)


def due(pending: Mapping[str, int], running: Iterable[WorkerKey]) -> list[tuple[str, int]]:
    """The registered sweeps (run -> newest stopped generation) whose workers are gone."""
    busy: dict[str, int] = {}
    for k in running:
        busy[k.run_id] = min(k.generation, busy.get(k.run_id, k.generation))
    return sorted((run, gen) for run, gen in pending.items()
                  if run not in busy or busy[run] > gen)


def plan(entries: Iterable[Entry], upto: int, limit: int = LIMIT) -> list[tuple[str, str]]:
    """The (generation dir, step dir) pairs to remove, oldest first, at most ``limit``."""
    doomed = []
    for gdir, sdir, has_manifest in entries:
        g, s = _GEN_DIR.match(gdir), _STEP_DIR.match(sdir)
        if g is None or s is None or has_manifest or int(g.group(1)) > upto:
            continue
        doomed.append((int(g.group(1)), int(s.group(1)), gdir, sdir))
    return [(gdir, sdir) for _, _, gdir, sdir in sorted(doomed)][:limit]


def sweep(root: str, run_id: str, upto: int, limit: int = LIMIT) -> list[str]:
    """Remove what :func:`plan` picks under ``<root>/<run_id>``; the URLs removed."""
    import fsspec  # the one I/O of this module

    fs, base = fsspec.core.url_to_fs(f"{root.rstrip('/')}/{run_id}")
    if not fs.exists(base):
        return []
    entries: list[Entry] = []
    for gpath in fs.ls(base, detail=False):
        gdir = str(gpath).rstrip("/").rsplit("/", 1)[-1]
        if (m := _GEN_DIR.match(gdir)) is None or int(m.group(1)) > upto:
            continue
        for spath in fs.ls(str(gpath), detail=False):
            sdir = str(spath).rstrip("/").rsplit("/", 1)[-1]
            if _STEP_DIR.match(sdir):
                entries.append((gdir, sdir, bool(fs.exists(f"{spath}/{MANIFEST}"))))
    removed = []
    for gdir, sdir in plan(entries, upto, limit):
        path = f"{base}/{gdir}/{sdir}"
        try:
            fs.rm(path, recursive=True)
        except FileNotFoundError:
            continue  # another agent sharing the storage removed it first
        removed.append(path)
    return removed


def root_of(command_env: Mapping[str, str], cwd: str) -> str | None:
    """The first tier's root a start command gives its workers (a relative one resolved
    where they run, as they resolve it); None when it names none or cannot be read."""
    from events.workerenv import CheckpointEnv, WorkerEnvError

    try:
        root = CheckpointEnv.from_environ(command_env).root
    except WorkerEnvError:
        return None
    if root is None or root.startswith("/") or "://" in root:
        return root
    return f"{cwd.rstrip('/')}/{root}"


def in_background(root: str, run_id: str, upto: int) -> threading.Thread:
    """A started thread running :func:`sweep`, logging what it removed or why it could not
    (best effort: ``runledger.rehearse.terminalcheck`` reports whatever remains)."""
    def work() -> None:
        try:
            for url in sweep(root, run_id, upto):
                log.info("%s g<=%d: removed uncommitted checkpoint residue %s", run_id, upto,
                         url)
        except Exception as exc:  # any fsspec backend's error
            log.error("%s g<=%d: could not sweep the residue under %s: %s", run_id, upto,
                      root, exc)

    thread = threading.Thread(target=work, name="agent-sweep", daemon=True)
    thread.start()
    return thread
