"""Where checkpoints live and what their files are called.

``<root>/<run id>/g<generation>/step-<step>/``: the path names run,
generation and step, so a stale generation's writes can never land in the
directory a newer generation commits, and garbage collection can tell
staging residue (no committed manifest in the log) from committed state.
``manifest.json`` is written last, once, and never rewritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MANIFEST = "manifest.json"
DCP_METADATA = ".metadata"
_STEP_DIR = re.compile(r"^step-(\d{10})$")
_GEN_DIR = re.compile(r"^g(\d{6})$")


@dataclass(frozen=True, slots=True)
class CheckpointDir:
    root: str
    run_id: str
    generation: int
    step: int

    @property
    def url(self) -> str:
        return (f"{self.root.rstrip('/')}/{self.run_id}/g{self.generation:06d}"
                f"/step-{self.step:010d}")

    @property
    def manifest_url(self) -> str:
        return f"{self.url}/{MANIFEST}"

    def file(self, name: str) -> str:
        return f"{self.url}/{name}"


def run_dir(root: str, run_id: str) -> str:
    return f"{root.rstrip('/')}/{run_id}"


def parse_generation(name: str) -> int | None:
    m = _GEN_DIR.match(name)
    return int(m.group(1)) if m else None


def parse_step(name: str) -> int | None:
    m = _STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def dir_of_manifest(manifest_url: str) -> str:
    if not manifest_url.endswith("/" + MANIFEST):
        raise ValueError(f"{manifest_url} does not name a {MANIFEST}")
    return manifest_url[: -len(MANIFEST) - 1]
