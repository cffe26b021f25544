"""What ``submit`` checks of a spec on the submitting machine before anything is written.

- :class:`DatasetPin`: the spec's ``dataset`` resolved to a manifest id through
  the catalog (an alias remembered, so ``submit`` can say what it resolved);
- :func:`check_code`: the spec's ``code.workdir``, program and script exist here.

Tested in tests/runledger/commands/test_runs.py.
"""

from __future__ import annotations

from pathlib import Path

from controller.spec.runspec import RunSpec
from dataplane.catalog import is_manifest_id
from events.launch import launch_problem
from runledger import config
from runledger.errors import RunledgerError


def check_code(spec: RunSpec, spec_path: Path) -> None:
    """Refuse a spec whose workdir, program or script is missing on this machine.

    A bare program name is the agent's business (its PATH, not ours).
    """
    if not spec.workdir:
        return
    problem = launch_problem(tuple(spec.command), spec.workdir, None)
    if problem is not None:
        raise RunledgerError(f"{spec_path}: {problem.message}; fix the spec, or pass"
                             " --remote-code if the code exists only on the nodes")


class DatasetPin:
    """The spec's ``dataset`` as a manifest id, from the catalog; remembers an alias it resolved.

    An alias is resolved through the catalog. A manifest id is checked against
    the catalog only where a catalog exists, so ids made elsewhere keep working;
    text that is neither is left to the spec's own check.
    """

    def __init__(self, catalog_url: str | None) -> None:
        self.catalog_url = catalog_url
        self.alias: str | None = None

    def __call__(self, ref: str) -> str:
        store = config.catalog(self.catalog_url)
        if ref.lower().startswith("sha256:"):
            if is_manifest_id(ref.lower()) and store.exists():
                store.resolve(ref.lower())
            return ref
        manifest_id = store.resolve(ref)
        self.alias = ref
        return manifest_id
