"""The ``runledger`` console script: every command named in one table, each loaded on demand.

A user waits for the whole process, imports included, so this module imports
nothing beyond the standard library and ``runledger.commandtable``, whose
``SECTIONS`` lists every command in the order a user meets them, with the
summary ``runledger --help`` prints; ``--help`` (and no command at all) and
``--version`` are answered from it without loading Typer or any command. Any
other command line goes to :data:`runledger.app.app`, whose root group imports
only the module of the command asked for (``runledger.commands.<module>``), so
``runledger status RUN`` never loads DuckDB, pyarrow, numpy or torch
(tests/runledger/test_cli_imports.py holds that true). ``app`` is importable
from here as before (``from runledger.cli import app``), loaded on first use.

Tested in tests/runledger/test_cli.py and tests/runledger/test_cli_imports.py.
"""

from __future__ import annotations

import sys
from typing import Any

from runledger.commandtable import COMMANDS, PROG, SECTIONS, root_help, version

__all__ = ["COMMANDS", "PROG", "SECTIONS", "main", "root_help", "version"]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args in ([], ["--help"]):
        sys.stdout.write(root_help())
        # No command at all is a usage error, as it always was (exit status 2).
        raise SystemExit(0 if args else 2)
    if args == ["--version"]:
        sys.stdout.write(f"{PROG} {version()}\n")
        raise SystemExit(0)
    from runledger.app import run

    run(args)


def __getattr__(name: str) -> Any:
    # ``from runledger.cli import app`` (tests, embedders): the Typer app, loaded on use.
    if name == "app":
        from runledger.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
