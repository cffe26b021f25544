"""Where the controller may write: its configured roots (``runledger controller
--allow-root``). Pure.

The controller writes one file of its own: a run's ``run-manifest.json``, under
the run's checkpoint root (its first tier's), when the run ends
(``controller.manifests``). A spec chooses that root, so without a limit any
operator could make the controller write wherever the controller's user may.
Two checks, both against the same roots:

- at admission: :func:`within` wraps the plan of a submission, so a spec
  whose checkpoint root lies outside the roots makes a plan that is invalid
  from the start (``RunPlan.invalid``, with no checkpoint settings): the run
  is refused before any start command, fails at once with a reason naming
  ``checkpoint.root`` and the allowed roots, and, having no root, gets no
  manifest file. It is the submitter's error: no node is involved. A run
  whose root an earlier controller allowed is failed the same way by a
  controller restarted with narrower roots, before it writes anything there;
- at the write: :func:`write_problem`, the shell's last check on the path
  itself, so nothing is written outside the roots whatever the plan said.

A relative checkpoint root is the workers' (resolved in ``code.workdir``); it is
judged there, and refused when the spec has no workdir to resolve it in.

Tested in tests/controller/test_roots.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from controller.model import PlanOf
from controller.runplan import RunPlan
from events.model import RunSubmitted
from events.names import PATH_OUTSIDE_ROOTS, outside_roots

ROOT_FIELD = "checkpoint.root"


def root_problem(plan: RunPlan, roots: Sequence[str]) -> str | None:
    """Why the controller may not write under ``plan``'s checkpoint root; None when it may
    (or when the spec names no root: the controller then writes no file)."""
    root = plan.checkpoint.root if plan.checkpoint is not None else None
    if not root:
        return None
    field = ROOT_FIELD if not plan.checkpoint or not plan.checkpoint.tiers else (
        f"checkpoint.tiers {plan.checkpoint.tiers[0].name!r} root")
    local_relative = not root.startswith("/") and "://" not in root
    if local_relative and not plan.workdir:
        return (f"{PATH_OUTSIDE_ROOTS}: {field} {root!r} is relative and the spec has no "
                "code.workdir to resolve it in; give an absolute root under one of the "
                f"controller's allowed roots ({_listed(roots)})")
    outside = outside_roots(root, roots, plan.workdir or "/", field)
    if outside is None:
        return None
    # The agents have roots of their own: say whose these are.
    said = outside.replace("the allowed roots", "the controller's allowed roots", 1)
    return (f"{said}; set {field} under one of them, or start the controller with --allow-root "
            f"{root}")


def within(plan_of: PlanOf, roots: Sequence[str]) -> PlanOf:
    """``plan_of`` whose plans are invalid (the run refused) when the controller may not
    write under their checkpoint root."""
    allowed = tuple(roots)

    def plan(event: RunSubmitted) -> RunPlan:
        made = plan_of(event)
        if made.invalid:
            return made
        problem = root_problem(made, allowed)
        if problem is None:
            return made
        # No checkpoint settings: the run that fails at once has no root to write under.
        return replace(made, invalid=problem, checkpoint=None)

    return plan


def write_problem(path: str, roots: Sequence[str]) -> str | None:
    """Why the controller may not write the file ``path``; None when it lies inside."""
    if not path.startswith("/") and "://" not in path:
        return (f"{PATH_OUTSIDE_ROOTS}: {path!r} is a relative path; the controller writes "
                f"only absolute paths inside its roots ({_listed(roots)})")
    return outside_roots(path, roots, "/", "the file")


def _listed(roots: Sequence[str]) -> str:
    return ", ".join(roots) if roots else "none"
