"""What a start command may name, run and point at on this node (rule 6 of
``agent.decide``). Pure.

Two kinds of refusal, because they blame different parties:

- a run id or logical id that breaks the naming rule (``events.names``) can
  only come from a forged or broken command: the controller makes them from a
  spec ``submit`` already checked. It is refused plainly (exit 125 with no
  ``launch_error``), as it always was;
- a path or program this agent may not use (a checkpoint root, tier root,
  resume manifest or candidate with a ``..`` segment or outside its allowed
  roots; an executable outside its ``--allow`` list; a relative
  ``code.workdir``) is the spec's choice against this agent's options. That
  is the job's error, not the node's: the refusal carries a ``launch_error``
  naming the spec field, its value, the agent's allowed roots and the two
  fixes (change the spec, or start the agent with the option that allows
  it), so the controller classifies it as ``job:launch``: never retried,
  never counted against the node.

Only the agent can judge the second kind: its allowed roots and ``--allow``
list are its own options, never written to the log, and each node's may
differ; ``submit`` checks what it can (no ``..``, names) before anything is
written.

Tested in tests/agent/test_decide.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from events.model import GroupStartCommanded, Member
from events.names import logical_id_problem, outside_roots, path_problem, run_id_problem
from events.workerenv import CheckpointEnv

NOT_ALLOWED = "not_allowed"  # a start's executable outside the agent's --allow list
# The spec fields a start command's paths come from, as a user writes them.
ROOT_FIELD = "checkpoint.root"
MANIFEST_FIELD = "the resume manifest"
CANDIDATE_FIELD = "a resume candidate"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a start launches nothing; ``launch_error`` is set when the spec, not the
    command or the node, is at fault (what the controller classifies as ``job``)."""

    problem: str
    launch_error: str = ""


@dataclass(frozen=True, slots=True)
class Options:
    """The agent's options that confine a start (from ``agent.decide.AgentConfig``)."""

    node: str
    allowed_roots: tuple[str, ...]
    base_dir: str
    allowed_executables: tuple[str, ...]


def refusal(options: Options, cmd: GroupStartCommanded,
            mine: Sequence[Member]) -> Refusal | None:
    """The first name, program or path of ``cmd`` this agent may not act on, if any.

    Raises ``WorkerEnvError`` when the checkpoint settings cannot be read at all.
    """
    for problem in (run_id_problem(cmd.run_id), *(logical_id_problem(m.logical_id)
                                                  for m in mine)):
        if problem is not None:
            return Refusal(problem)
    spec = _spec_problem(options, cmd)
    if spec is not None:
        return Refusal(spec, f"the agent on {options.node} refused the start: {spec}")
    return None


def _spec_problem(options: Options, cmd: GroupStartCommanded) -> str | None:
    ckpt = CheckpointEnv.from_environ(cmd.env)
    # With tiers the root is the first tier's: name the tier the user wrote.
    roots: list[tuple[str, str | None]] = [
        (f"checkpoint.tiers {t.name!r} root", t.root) for t in ckpt.tiers] or [
        (ROOT_FIELD, ckpt.root)]
    manifests = [(MANIFEST_FIELD, cmd.resume_manifest),
                 *((CANDIDATE_FIELD, manifest) for _, manifest, _ in ckpt.candidates)]
    program = cmd.argv[0] if cmd.argv else ""
    if options.allowed_executables and program not in options.allowed_executables:
        allowed = " ".join(options.allowed_executables)
        return (f"{NOT_ALLOWED}: the command's executable {program!r} is not one the agent "
                f"may run (--allow {allowed}); make command[0] one of them, or start the "
                f"agent on {options.node} with --allow {program or '<program>'}")
    if cmd.workdir and not cmd.workdir.startswith("/"):
        return f"code.workdir {cmd.workdir!r} must be an absolute path"
    allowed_roots = (options.base_dir, *options.allowed_roots)
    # A relative path is the worker's, so it resolves in the worker's directory.
    base = cmd.workdir or options.base_dir
    for field, path in (*roots, *manifests):
        if path is None:
            continue
        bad = path_problem(path, field)
        if bad is not None:
            return bad
        outside = outside_roots(path, allowed_roots, base, field)
        if outside is not None:
            return f"{outside}; {_fix(options.node, field, path)}"
    return None


def _fix(node: str, field: str, path: str) -> str:
    """What to do about a path outside the allowed roots: either side may change."""
    if field in (MANIFEST_FIELD, CANDIDATE_FIELD):
        return (f"set checkpoint.root under one of them, or start the agent on {node} with "
                "--allow-root naming the checkpoint root that holds it")
    return (f"set {field} under one of them, or start the agent on {node} with "
            f"--allow-root {path}")
