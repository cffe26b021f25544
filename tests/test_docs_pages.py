"""The documentation's pages against the repository and the code (issue #36).

README.md and every docs/*.md page:

- every relative link resolves to a file, and every ``#anchor`` into a markdown
  file to one of its headings (GitHub's slugs);
- every page under docs/ is reachable from the README by following links;
- every command in their ``sh``, ``bash``, ``shell`` and ``console`` blocks that
  the suite can check names what exists: a ``runledger`` command path and each
  of its options, by the real CLI parser (built, never run); a ``make`` target;
  a ``python -m`` module and the options its source parses; a script under
  scripts/, bench/ or examples/; commands it cannot check (docker, ssh, the
  shell's own words, ...) are skipped by name (:data:`SKIPPED`), never silently;
- docs/cli.md, the command line reference, names every command the parser has
  and every option it does not hide, and the options in its synopsis are the
  parser's.

Each failure names the file and line it comes from. Pure: no broker, no process.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLI_PAGE = ROOT / "docs" / "cli.md"
SHELL_BLOCKS = {"sh", "bash", "shell", "console"}
# First words of commands the suite cannot check here, skipped by name: other
# programs (a Docker engine, a Kafka distribution's scripts, a remote shell) and
# the shell's own words. A command whose first word is in neither this list nor
# the checked kinds fails, so a new kind of command is noticed, not passed over.
SKIPPED = frozenset({
    "docker", "kafka-topics", "kafka-topics.sh", "curl", "ssh", "openssl", "pip",
    ".", "source", "export", "set", "cd", "mkdir", "cat", "echo", "printf", "kill",
    "wait", "for", "do", "done", "if", "then", "fi", "grep", "sed", "tee", "tail",
    "head", "chmod", "rm", "cp", "mv", "ls", "true", "false", "timeout",
})
PYTHONS = frozenset({"python", "python3", "python3.11", ".venv/bin/python", "$PY"})
RUNLEDGERS = frozenset({"runledger", ".venv/bin/runledger"})
REPO_PATH = re.compile(r"^(?:\./)?(?:scripts|bench|examples)/[\w./-]+$")
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9 _-]*>")
REDIRECTS = frozenset({">", ">>", "<", ">&", "&>", "<&", ">|", "<>"})
CONTROL = frozenset({";", "&", "&&", "|", "||", "(", ")", ";;", "|&"})


def pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def where(path: Path, line: int) -> str:
    return f"{shown(path)}:{line}"


# --- markdown ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Block:
    info: str  # the fence's info string (its language), "" when none
    line: int  # the line of the block's first content line
    lines: tuple[str, ...]


def blocks(text: str) -> Iterator[Block]:
    fence: str | None = None
    info, start = "", 0
    body: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None:
            m = re.match(r"^(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if m:
                fence, info, start, body = m[1], m[2].lower(), n + 1, []
        elif stripped.startswith(fence) and not stripped.strip(fence[0]):
            yield Block(info, start, tuple(body))
            fence = None
        else:
            body.append(line)


def prose(text: str) -> str:
    """The text with code blocks and inline code spans blanked (newlines kept)."""
    lines = text.splitlines(keepends=True)
    fenced = {n - 1 for b in blocks(text) for n in range(b.line - 1, b.line + len(b.lines) + 1)}
    kept = "".join("\n" if i in fenced else ln for i, ln in enumerate(lines))
    # A code span ends at a run of as many backticks as opened it, within its paragraph.
    span = r"(`+)(?:[^`\n]|\n(?![ \t]*\n)|(?!\1)`+)*?\1(?!`)"
    return re.sub(span, lambda m: re.sub(r"[^\n]", " ", m[0]), kept)


LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(path: Path) -> Iterator[tuple[int, str]]:
    text = prose(path.read_text())
    for m in LINK.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m[1]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lower-cased, punctuation but
    hyphens, underscores and spaces dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    text = prose(path.read_text())
    seen: dict[str, int] = {}
    found = set()
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m[1])
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I)


# --- 1. links -------------------------------------------------------------------------------

def link_problems(page: Path) -> list[str]:
    problems = []
    for line, target in links(page):
        if not relative(target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            problems.append(f"{where(page, line)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where(page, line)}: {target}: {shown(dest)} has no heading "
                            f"#{anchor}")
    return problems


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = [p for page in pages() for p in link_problems(page)]
    assert not problems, "\n".join(problems)


def test_the_link_check_catches_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# B\n\n## Run spec ranges\n")
    page = tmp_path / "a.md"
    page.write_text("# A\n\n[ok](b.md#run-spec-ranges) [top](#a) [web](https://x.org/y)\n"
                    "[gone](c.md) and [a\nlink over two lines](b.md#nothing)\n\n"
                    "`[in code](d.md)`\n\n```sh\n[in a block](e.md)\n```\n")
    assert link_problems(page) == [
        f"{page}:4: c.md: no such file",
        f"{page}:4: b.md#nothing: {tmp_path / 'b.md'} has no heading #nothing"]


# --- 2. reachability ---------------------------------------------------------------------------

def test_every_docs_page_is_reachable_from_the_readme() -> None:
    reached, todo = {README}, [README]
    while todo:
        page = todo.pop()
        for _, target in links(page):
            file = target.partition("#")[0]
            if not relative(target) or not file.endswith(".md"):
                continue
            dest = (page.parent / file).resolve()
            if dest.exists() and ROOT in dest.parents and dest not in reached:
                reached.add(dest)
                todo.append(dest)
    unreached = [str(p.relative_to(ROOT)) for p in pages() if p not in reached]
    assert not unreached, f"not reachable from README.md by its links: {unreached}"


# --- 3. commands in shell blocks -----------------------------------------------------------

def shell_lines(block: Block) -> Iterator[tuple[int, str]]:
    """A block's command lines (continuations joined, heredoc bodies and a console's
    output left out), each with its line number."""
    ending: str | None = None
    pending, first = "", 0
    for i, raw in enumerate(block.lines):
        n = block.line + i
        if ending is not None:
            if raw.strip() == ending:
                ending = None
            continue
        if block.info == "console" and not pending:
            if not raw.startswith("$ "):
                continue
            raw = raw[2:]
        if not pending:
            first = n
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line, pending = pending + raw, ""
        heredoc = re.search(r"<<-?\s*(['\"]?)(\w+)\1", line)
        if heredoc:
            ending = heredoc[2]
            line = line[:heredoc.start()]
        yield first, line


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line: split at control operators, without
    redirections, leading variable assignments or comments."""
    lexer = shlex.shlex(PLACEHOLDER.sub("PLACEHOLDER", line), posix=True,
                        punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    commands: list[list[str]] = [[]]
    skip = False
    for i, token in enumerate(tokens):
        if skip:
            skip = False
        elif token in CONTROL:
            commands.append([])
        elif token in REDIRECTS:
            skip = True
        elif token.isdigit() and i + 1 < len(tokens) and tokens[i + 1] in REDIRECTS:
            continue
        elif not commands[-1] and re.match(r"^[A-Za-z_]\w*=", token):
            continue  # NAME=value before the command
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, flags=re.M))


@cache
def cli_command(path: tuple[str, ...]) -> Any:
    """The click command of ``runledger <path...>``, or None; built from the real
    Typer app (``runledger.app.load``), never run."""
    from runledger.app import load
    from runledger.commandtable import COMMANDS

    if not path or path[0] not in COMMANDS:
        return None
    cmd = load(path[0])
    for name in path[1:]:
        cmd = getattr(cmd, "commands", {}).get(name)
        if cmd is None:
            return None
    return cmd


def options_of(cmd: Any) -> frozenset[str]:
    opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}
    return frozenset({*opts, "--help"})


def subcommands(cmd: Any) -> dict[str, Any]:
    found: dict[str, Any] = getattr(cmd, "commands", {})
    return found


def check_runledger(args: list[str]) -> str | None:
    if not args or args[0] in ("--help", "--version"):
        return None
    path: list[str] = []
    rest = list(args)
    while rest and not rest[0].startswith("-"):
        path.append(rest.pop(0))
        cmd = cli_command(tuple(path))
        if cmd is None:
            return f"no command `runledger {' '.join(path)}`"
        if not subcommands(cmd):
            break
    cmd = cli_command(tuple(path))
    if cmd is None:
        return f"no command `runledger {' '.join(path)}`"
    if subcommands(cmd) and rest and rest[0] != "--help":
        return f"`runledger {' '.join(path)}` needs one of {sorted(subcommands(cmd))}"
    known = options_of(cmd)
    for arg in rest:
        if arg.startswith("-") and arg != "-" and not re.match(r"^-\d", arg):
            option = arg.split("=", 1)[0]
            if option not in known:
                return f"`runledger {' '.join(path)}` has no option {option}"
    return None


def source_names(option: str, source: Path) -> bool:
    return f'"{option}"' in source.read_text() or f"'{option}'" in source.read_text()


def check_python(args: list[str]) -> str | None:
    if args[:1] == ["-m"] and len(args) > 1:
        module = args[1]
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            return f"no module {module} (python -m {module})"
        source, rest = Path(spec.origin), args[2:]
    elif args and args[0].endswith(".py"):
        source, rest = ROOT / args[0], args[1:]
        if not source.exists():
            return f"no script {args[0]}"
    else:
        return None
    for arg in rest:
        if arg.startswith("--") and not source_names(arg.split("=", 1)[0], source):
            return f"{source.relative_to(ROOT)} parses no option {arg}"
    return None


@cache
def compose_runledger(service: str) -> tuple[str, ...] | None:
    """The ``runledger`` arguments a compose.yaml service's entrypoint puts before the
    command line ``docker compose run SERVICE ...`` gives it; None: not runledger."""
    import yaml

    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    entry = [str(e) for e in (services.get(service) or {}).get("entrypoint") or []]
    if entry[:1] == ["runledger"]:
        return tuple(entry[1:])
    if any('exec runledger "$$@"' in e for e in entry):
        return ()
    return None


def check_compose_run(args: list[str]) -> str | None:
    """``docker compose run [--rm] SERVICE ARGS``: a runledger command line when the
    service's entrypoint is runledger's (compose.yaml), else skipped."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        if rest.pop(0) not in ("--rm", "-d", "--detach", "-T", "--no-deps"):
            return "skip"  # --entrypoint, -e, -v, ...: not a plain runledger call
    if not rest:
        return "skip"
    prefix = compose_runledger(rest[0])
    if prefix is None:
        return "skip"
    return check_runledger([*prefix, *rest[1:]])


def check(command: list[str]) -> str | None:
    """What is wrong with one simple command, "skip" for one the suite cannot check."""
    for arg in command[1:]:
        if REPO_PATH.match(arg) and not (ROOT / arg).exists():
            return f"no file {arg}"
    word, args = command[0], command[1:]
    if word in RUNLEDGERS:
        return check_runledger(args)
    if word == "docker" and args[:2] == ["compose", "run"]:
        return check_compose_run(args[2:])
    if word in PYTHONS:
        return check_python(args)
    if word == "make":
        missing = [a for a in args if not a.startswith("-") and "=" not in a
                   and a not in make_targets()]
        return f"the Makefile has no target {missing}" if missing else None
    if REPO_PATH.match(word):
        return None if (ROOT / word).exists() else f"no file {word}"
    if word in SKIPPED or Path(word).name in SKIPPED:
        return "skip"
    return f"`{word}`: neither checked nor in SKIPPED (tests/test_docs_pages.py)"


def shell_commands() -> Iterator[tuple[str, list[str]]]:
    for page in pages():
        for block in blocks(page.read_text()):
            if block.info not in SHELL_BLOCKS:
                continue
            for line, text in shell_lines(block):
                for command in simple_commands(text):
                    yield where(page, line), command


def test_every_command_in_the_pages_shell_blocks_names_what_exists() -> None:
    problems, checked = [], 0
    for at, command in shell_commands():
        verdict = check(command)
        if verdict is None:
            checked += 1
        elif verdict != "skip":
            problems.append(f"{at}: {verdict}: {shlex.join(command)}")
    assert not problems, "\n".join(problems)
    assert checked > 20, "the pages' shell blocks should hold commands this test checks"


def test_the_command_checks_catch_what_is_stale() -> None:
    assert check(["runledger", "stack", "up", "--json"]) is None
    assert check(["runledger", "node", "cordon", "n1", "--reason=r"]) is None
    assert check(["runledger", "stack", "upp"]) == "no command `runledger stack upp`"
    assert check(["runledger", "status", "RUN", "--wath"]) == (
        "`runledger status` has no option --wath")
    assert check(["make", "tset"]) == "the Makefile has no target ['tset']"
    assert check(["python", "-m", "proof.nosuch"]) is not None
    assert check(["python", "-m", "proof.sim", "--seeds", "3"]) is None
    assert check(["python", "-m", "proof.sim", "--sedes", "3"]) is not None
    assert check(["docker", "compose", "up"]) == "skip"
    assert check(["docker", "compose", "run", "--rm", "cli", "status", "RUN", "--watch"]) is None
    assert check(["docker", "compose", "run", "--rm", "query", "ettr", "RUN", "--wath"]) == (
        "`runledger query` has no option --wath")
    assert check(["frobnicate"]) is not None
    assert simple_commands("RUN=$(runledger submit a.yaml)") == [
        ["runledger", "submit", "a.yaml"]]
    assert simple_commands("runledger agent --node n1 > a.log 2>&1 &  # note") == [
        ["runledger", "agent", "--node", "n1"]]
    assert simple_commands("runledger status <run id> --json") == [
        ["runledger", "status", "PLACEHOLDER", "--json"]]


def test_the_anchor_rules_are_github_s() -> None:
    assert slug("17.1 The model's traces replayed against the real core") == (
        "171-the-models-traces-replayed-against-the-real-core")
    assert slug("Workers' environment") == "workers-environment"
    assert slug("The `runledger` CLI, *again*") == "the-runledger-cli-again"


# --- 4. the CLI reference ----------------------------------------------------------------------

def every_command_path() -> list[tuple[str, ...]]:
    from runledger.commandtable import COMMANDS

    found: list[tuple[str, ...]] = []

    def walk(path: tuple[str, ...]) -> None:
        found.append(path)
        for name in sorted(subcommands(cli_command(path))):
            walk((*path, name))

    for name in COMMANDS:
        walk((name,))
    return found


def synopsis(text: str) -> Iterator[tuple[int, str]]:
    """The lines of cli.md's synopsis block (the block that opens with
    ``runledger --help | --version``)."""
    for block in blocks(text):
        if block.lines and block.lines[0].startswith("runledger --help"):
            yield from ((block.line + i, ln) for i, ln in enumerate(block.lines))


def synopsis_paths(line: str) -> list[tuple[str, ...]]:
    """The command paths one synopsis line names (``a|b`` alternatives expanded)."""
    words = line.split()[1:]
    paths: list[tuple[str, ...]] = [()]
    for word in words:
        if not re.match(r"^[a-z][a-z|-]*$", word):
            break
        extended = [(*p, alt) for p in paths for alt in word.split("|")]
        if cli_command(extended[0]) is None:
            break
        paths = extended
        if not subcommands(cli_command(paths[0])):
            break
    return [p for p in paths if p]


def test_the_cli_reference_documents_every_command_and_only_real_options() -> None:
    text = CLI_PAGE.read_text()
    flat = " ".join(text.split())
    problems, listed = [], set()
    for line, entry in synopsis(text):
        if entry.startswith("runledger --help"):
            continue
        paths = synopsis_paths(entry)
        if not paths:
            problems.append(f"{where(CLI_PAGE, line)}: no such command: {entry}")
        for path in paths:
            listed.add(path)
            known = options_of(cli_command(path))
            for option in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", entry):
                if option not in known:
                    problems.append(f"{where(CLI_PAGE, line)}: `runledger {' '.join(path)}` "
                                    f"has no option {option}")
    for path in every_command_path():
        cmd = cli_command(path)
        if subcommands(cmd):
            continue
        named = f"runledger {' '.join(path)}"
        if path not in listed and named not in flat:
            problems.append(f"{CLI_PAGE.relative_to(ROOT)}: `{named}` is not documented")
        for param in cmd.params:
            names = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
            if names and not getattr(param, "hidden", False) and not any(
                    re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", flat) for o in names):
                problems.append(f"{CLI_PAGE.relative_to(ROOT)}: `{named}`'s option "
                                f"{names[0]} is not documented")
    assert not problems, "\n".join(problems)
