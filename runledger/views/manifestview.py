"""``runledger query manifest RUN``: the post-run manifest, rebuilt from the log and checked.

:func:`check` takes the run's ``runledger.runs`` facts in log order, rebuilds the
document with the function the controller used (``events.runmanifest.build``),
and compares three digests: the one ``RunManifestPublished`` recorded, the
rebuilt document's, and that of the bytes of ``run-manifest.json`` where the
fact says it was written. :func:`lines` words the result for a person.

Tested in tests/runledger/views/test_manifestview.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from events import runmanifest
from events.model import Event, RunManifestPublished
from runledger.errors import RunledgerError

ReadBytes = Callable[[str], bytes | None]  # None: no such file


def check(run_id: str, facts: Sequence[Event], read: ReadBytes) -> dict[str, Any]:
    """The manifest and whether the log, the rebuilt document and the file agree."""
    doc = runmanifest.build(e for e in facts if e.run_id == run_id)
    if doc is None:
        raise RunledgerError(f"run {run_id!r} has no RunSubmitted on runledger.runs: check the"
                             " id with `runledger runs`")
    rebuilt = runmanifest.digest(doc)
    published = next((e for e in reversed(facts)
                      if isinstance(e, RunManifestPublished) and e.run_id == run_id), None)
    out: dict[str, Any] = {"run_id": run_id, "manifest": doc, "digest": rebuilt,
                           "published": None, "file": None, "ok": False}
    if published is None:
        return out  # the run has not ended: the document so far, unpublished
    out["published"] = {"digest": published.digest, "path": published.path,
                        "event_id": published.header.event_id,
                        "rebuilt_matches": published.digest == rebuilt}
    file: dict[str, Any] | None = None
    if published.path:
        try:
            data = read(published.path)
        except Exception as exc:  # any fsspec backend's error: reported, not raised
            file = {"path": published.path, "present": None, "error": f"{exc}"}
        else:
            digest = None if data is None else "sha256:" + hashlib.sha256(data).hexdigest()
            file = {"path": published.path, "present": data is not None, "digest": digest,
                    "matches": digest == published.digest}
    out["file"] = file
    out["ok"] = published.digest == rebuilt and (file is None or file.get("matches") is True)
    return out


def lines(result: dict[str, Any]) -> list[str]:
    """The document, then what agrees with what."""
    out = [json.dumps(result["manifest"], indent=2, sort_keys=True)]
    published, file = result["published"], result["file"]
    if published is None:
        ended = result["manifest"]["status"] in ("Succeeded", "Failed", "Cancelled")
        why = ("ended before this version published manifests" if ended
               else "has not ended; this is its manifest so far")
        out.append(f"not published: run {result['run_id']} {why} ({result['digest']})")
        return out
    same = "the same" if published["rebuilt_matches"] else f"DIFFERENT ({result['digest']})"
    out.append(f"log:     RunManifestPublished {published['digest']}")
    out.append(f"rebuilt from the log's facts: {same}")
    if file is None:
        out.append("file:    none (the run has no checkpoint root; the log keeps the manifest)")
    elif file["present"] is None:
        out.append(f"file:    {file['path']} could not be read: {file['error']}")
    elif not file["present"]:
        out.append(f"file:    {file['path']} is MISSING (the controller logs why it could not"
                   " write it)")
    else:
        verdict = "digest equals the log's" if file["matches"] else \
            f"digest {file['digest']} DIFFERS from the log's"
        out.append(f"file:    {file['path']}: {verdict}")
    return out
