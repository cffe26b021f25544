"""What a start command may name, run and point at on this node (rule 6 of
``agent.decide``). Pure.

Two kinds of refusal, because they blame different parties:

- a run id or logical id that breaks the naming rule (``events.names``) can
  only come from a forged or broken command: the controller makes them from a
  spec ``submit`` already checked. It is refused plainly (exit 125 with no
  ``launch_error``), as it always was;
- a path or program this agent may not use (a checkpoint root, tier root,
  resume manifest or candidate with a ``..`` segment or outside its allowed
  roots; a relative ``code.workdir``, or one outside its allowed workdirs;
  with an ``--allow`` list, an ``env`` that changes what code a program
  loads, ``LOADER_VARS``) is the spec's choice against this agent's options. That
  is the job's error, not the node's: the refusal carries a ``launch_error``
  naming the spec field, its value, the agent's allowed roots and the two
  fixes (change the spec, or start the agent with the option that allows
  it), so the controller classifies it as ``job:launch``: never retried,
  never counted against the node.

Only the agent can judge the second kind: its allowed roots and ``--allow``
list are its own options, never written to the log, and each node's may
differ; ``submit`` checks what it can (no ``..``, names) before anything is
written.

Which file ``argv[0]`` names depends on the file system and the worker's whole
environment, so the ``--allow`` list itself is judged at launch, in the shell
(``agent.allow``, run by ``agent.procs``), with the same kind of refusal.
What this module adds for an ``--allow`` list is the part it can judge from
the command alone: an allowed program is only as confined as the code it
loads, so a spec may not set the loader's and interpreters' search variables
(``LOADER_VARS``, any ``LD_*``): ``LD_PRELOAD`` would run any code inside an
allowed binary, ``PYTHONPATH`` or ``BASH_ENV`` inside an allowed wrapper.

Tested in tests/agent/test_decide.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from events.model import GroupStartCommanded, Member
from events.names import logical_id_problem, outside_roots, path_problem, run_id_problem
from events.workerenv import CheckpointEnv

NOT_ALLOWED = "not_allowed"  # what an --allow list forbids (agent.allow for argv[0])
# With an --allow list, the spec's env may not name these (nor any LD_*): each makes an
# allowed program load code of the spec's choosing (the dynamic loader, the shells' and
# interpreters' start-up files and module paths).
LOADER_VARS = frozenset({
    "BASH_ENV", "ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
    "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYLIB", "RUBYOPT", "NODE_OPTIONS", "NODE_PATH",
    "GCONV_PATH"})
WORKDIR_FIELD = "code.workdir"
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
    # Where code.workdir may lie besides base_dir and allowed_roots (--allow-workdir).
    allowed_workdirs: tuple[str, ...] = ()


def root_option_problem(root: str) -> str | None:
    """Why an ``--allow-root`` value cannot be a root: a ``..``, or neither absolute nor a URL."""
    problem = path_problem(root, f"--allow-root {root!r}")
    if problem is None and not (root.startswith("/") or "://" in root):
        problem = f"--allow-root {root!r} must be an absolute path or a URL"
    return problem


def workdir_option_problem(root: str) -> str | None:
    """Why an ``--allow-workdir`` value cannot be one: workers run locally, so a local path."""
    problem = path_problem(root, f"--allow-workdir {root!r}")
    if problem is None and not root.startswith("/"):
        problem = f"--allow-workdir {root!r} must be an absolute path (workers run locally)"
    return problem


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
    if options.allowed_executables:
        loaders = sorted(k for k in cmd.env if k in LOADER_VARS or k.startswith("LD_"))
        if loaders:
            return (f"{NOT_ALLOWED}: env sets {', '.join(loaders)}, which would make the "
                    "allowed program load code of the spec's choosing; drop it from the "
                    f"spec's env, or start the agent on {options.node} without --allow")
    if cmd.workdir and not cmd.workdir.startswith("/"):
        return f"code.workdir {cmd.workdir!r} must be an absolute path"
    allowed_roots = (options.base_dir, *options.allowed_roots)
    if cmd.workdir:
        workdir_roots = (*allowed_roots, *options.allowed_workdirs)
        outside = outside_roots(cmd.workdir, workdir_roots, options.base_dir, WORKDIR_FIELD)
        if outside is not None:
            return (f"{outside}; set {WORKDIR_FIELD} under one of them, or start the agent "
                    f"on {options.node} with --allow-workdir {cmd.workdir}")
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
