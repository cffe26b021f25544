"""The shell's one action for a post-run manifest: write ``run-manifest.json``.

The core decides (``controller.emitter`` appends ``RunManifestPublished`` in the
transaction that ends the run); once that transaction committed, the service
calls :func:`write_published` with the records it appended and the model they
produced. It rebuilds each document from the model (``events.runmanifest``),
checks that its digest is the one in the log, and writes it once through fsspec
next to the run's checkpoints. A file already there with the same bytes is left
alone (a cycle retried after a crash); one with other bytes is never
overwritten. A write that fails is logged with the path and the error and does
not stop the controller: the fact in the log is the record, and
``runledger query manifest RUN`` rebuilds the document from the log and says
whether the file matches it. Given the controller's roots (``controller.roots``),
a path outside them is never written, whatever the fact names: logged, and
left to ``query manifest`` too.

Tested in tests/controller/test_manifests.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import fsspec

from controller.model import Model
from controller.roots import write_problem
from events import runmanifest
from events.model import Event, RunManifestPublished

log = logging.getLogger(__name__)


def write_published(model: Model, events: Iterable[Event],
                    roots: Sequence[str] | None = None) -> list[str]:
    """Write the file of every ``RunManifestPublished`` among ``events`` that names a path
    (inside ``roots``, when given); the paths written (or found already written with the
    same bytes)."""
    done: list[str] = []
    for event in events:
        if not isinstance(event, RunManifestPublished) or not event.path:
            continue
        outside = write_problem(event.path, roots) if roots is not None else None
        if outside is not None:
            log.error("run %s: not writing its manifest: %s; `runledger query manifest %s` "
                      "rebuilds it from the log", event.run_id, outside, event.run_id)
            continue
        run = model.tracked(event.run_id)
        if run is None:
            continue
        doc = runmanifest.document(run.state, run.tally)
        if runmanifest.digest(doc) != event.digest:
            log.error("run %s: the manifest rebuilt from the model has digest %s, the log "
                      "says %s; not writing %s (rebuild it with `runledger query manifest "
                      "%s`)", event.run_id, runmanifest.digest(doc), event.digest, event.path,
                      event.run_id)
            continue
        try:
            if write_once(event.path, runmanifest.encode(doc)):
                done.append(event.path)
        except Exception as exc:  # any fsspec backend's error: the log keeps the fact
            log.error("run %s: could not write its manifest to %s (%s: %s); the log holds "
                      "its digest, `runledger query manifest %s` rebuilds it", event.run_id,
                      event.path, type(exc).__name__, exc, event.run_id)
    return done


def write_once(url: str, data: bytes) -> bool:
    """Write ``data`` at ``url`` unless a file is there: True when the file now holds
    ``data`` (written, or already there the same); False when it holds other bytes."""
    fs, path = fsspec.core.url_to_fs(url)
    if fs.exists(path):
        with fs.open(path, "rb") as f:
            same = bool(f.read() == data)
        if not same:
            log.error("%s already exists with other contents; a manifest is written once "
                      "and never replaced", url)
        return same
    parent = path.rsplit("/", 1)[0]
    if parent and parent != path:
        fs.makedirs(parent, exist_ok=True)
    tmp = path + ".partial"
    with fs.open(tmp, "wb") as f:
        f.write(data)
    fs.mv(tmp, path)
    return True
