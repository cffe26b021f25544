"""The commands a user types most start without the heavy libraries (issue #34).

Each command runs as a user runs it, in a process of its own, against the
session's broker; the process reports, as it exits, which of numpy, DuckDB,
pyarrow and torch it loaded. `runledger --help` and `--version` load no Typer
and no command at all. The root help lists every command of the table, and the
table agrees with what each command module registers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import typer
import typer.main

from runledger.cli import COMMANDS, SECTIONS, root_help, version
from tests.test_docs import ROOT

HEAVY = ("numpy", "duckdb", "pyarrow", "torch")
# Run as `python -c PROBE ARGS...`: the command line as a user types it, then, at exit,
# which of HEAVY (and whether Typer) the process had loaded.
PROBE = f"HEAVY = {set(HEAVY)!r}\n" + """
import atexit, json, sys
def said():
    names = sorted(m for m in sys.modules if m in HEAVY)
    sys.stderr.write("LOADED " + json.dumps(names + (["typer"] if "typer" in sys.modules
                                                      else [])) + "\\n")
atexit.register(said)
from runledger.cli import main
main(sys.argv[1:])
"""


def loaded(*args: str, env: dict[str, str] | None = None) -> tuple[list[str], str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env or dict(os.environ), check=False)
    line = [x for x in done.stderr.splitlines() if x.startswith("LOADED ")]
    assert line, done.stderr
    return json.loads(line[-1][len("LOADED "):]), done.stdout + done.stderr


def test_help_and_version_load_nothing_but_the_table() -> None:
    for args in (["--help"], ["--version"], []):
        modules, out = loaded(*args)
        assert modules == [], (args, modules)
    modules, out = loaded("--help")
    assert out.startswith("Usage: runledger COMMAND [ARGS]...")
    for name in COMMANDS:
        assert f"\n  {name} " in out, name
    _, said = loaded("--version")
    assert said.splitlines()[0] == f"runledger {metadata.version('runledger')}"  # installed
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version() == project


@pytest.mark.kafka
def test_the_common_commands_start_without_numpy_duckdb_pyarrow_or_torch(
        bootstrap: str, tmp_path: Path) -> None:
    env = {**os.environ, "RUNLEDGER_BOOTSTRAP": bootstrap}
    spec = ROOT / "examples" / "tiny.yaml"
    for args in (["status", "no-such-run"], ["status", "no-such-run", "--json"], ["runs"],
                 ["nodes"], ["logs", "no-such-run"], ["submit", str(spec), "--dry-run"],
                 ["cancel", "--help"], ["resume", "--help"], ["status", "--help"]):
        modules, out = loaded(*args, env=env)
        assert not set(modules) & set(HEAVY), (args, modules, out[-2000:])


def test_the_table_names_every_command_as_its_module_registers_it() -> None:
    """Name, module and summary (the first paragraph of its help) agree, and no module
    registers a command the table lacks."""
    seen: dict[str, str] = {}
    for module in sorted({c.module for c in COMMANDS.values()}):
        app = typer.Typer()
        __import__(module)
        sys.modules[module].register(app)
        group = typer.main.get_group(app)
        ctx = typer.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            first = " ".join((command.help or "").split("\n\n")[0].split())
            seen[name] = module
            assert name in COMMANDS, f"{module} registers {name!r}, which the table lacks"
            assert COMMANDS[name].module == module, name
            assert COMMANDS[name].summary == first, name
    assert set(seen) == set(COMMANDS)
    assert [c.name for _, group in SECTIONS for c in group] == list(COMMANDS)  # no duplicate


def test_the_root_help_wraps_to_the_terminal_and_keeps_every_summary() -> None:
    for width in (60, 100):
        text = root_help(width)
        assert max(len(line) for line in text.splitlines()) <= width
        flat = " ".join(text.split())
        assert all(c.summary in flat for c in COMMANDS.values())
