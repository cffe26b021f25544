"""Run the ``.sql`` files of this package against a projection.

A query file names its inputs with ``getvariable(...)``; ``run_query`` sets
``run_id`` and any extra parameters as DuckDB variables on its own cursor, so
the same file runs unchanged in the DuckDB CLI. ``spans.sql`` is no query: it
defines the TEMP table macros several queries share (a run's span, its
generations, its steps and which were redone), and :func:`sql_text` puts it
before every query, so each is said once (in the CLI, ``.read`` it first). Names
and runs are checked first, so a typo gets a list of what exists rather than an
empty table.

Tested in tests/queries/test_queries.py and tests/queries/test_ettr_properties.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

from queries.errors import QueryError

_OPTIONAL = ("checkpoint_step", "straggler_ratio")
# The shared table macros: a .sql file of the package, but no query of its own.
SHARED = "spans"


def names() -> list[str]:
    """Every query this package ships, by file name."""
    return sorted(e.name[:-4] for e in resources.files("queries").iterdir()
                  if e.name.endswith(".sql") and e.name != f"{SHARED}.sql")


def _read(name: str) -> str:
    return resources.files("queries").joinpath(f"{name}.sql").read_text("utf-8")


def sql_text(name: str) -> str:
    """Query ``name`` as one script: the shared macros (CREATE OR REPLACE TEMP, so it
    runs again on the same connection), then the query, whose rows the script returns."""
    if name not in names():
        raise QueryError(f"unknown query {name!r}; queries: {', '.join(names())}")
    return f"{_read(SHARED)}\n{_read(name)}"


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    run_id: str
    columns: list[str]
    rows: list[tuple[Any, ...]]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def connect(db: str | Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a projection file that must exist."""
    path = Path(db)
    if not path.exists():
        raise QueryError(f"no projection at {path}; run `runledger project --db {path}` first")
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise QueryError(f"cannot open {path}: {exc}") from None


def known_runs(con: duckdb.DuckDBPyConnection, limit: int = 20) -> list[str]:
    rows = con.execute("SELECT run_id FROM runs ORDER BY submitted_at DESC, run_id LIMIT ?",
                       [limit]).fetchall()
    return [r[0] for r in rows]


def check_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    found = con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if not found or found[0] == 0:
        runs = known_runs(con)
        listed = ", ".join(runs) if runs else "none yet"
        raise QueryError(f"unknown run {run_id!r}; runs in this projection (newest first):"
                         f" {listed}")


def run_query(con: duckdb.DuckDBPyConnection, name: str, run_id: str,
              **params: Any) -> Result:
    """Run query ``name`` for ``run_id``; ``params`` fill its optional variables."""
    text = sql_text(name)
    unknown = set(params) - set(_OPTIONAL)
    if unknown:
        raise QueryError(f"unknown parameter(s) {sorted(unknown)}; known: {list(_OPTIONAL)}")
    cur = con.cursor()  # variables are per connection: keep them off the caller's
    try:
        check_run(cur, run_id)
        cur.execute("SET VARIABLE run_id = ?", [run_id])
        for key in _OPTIONAL:
            value = params.get(key)
            if value is None:
                cur.execute(f"RESET VARIABLE {key}")
            else:
                cur.execute(f"SET VARIABLE {key} = ?", [value])
        cur.execute(text)
        columns = [d[0] for d in cur.description or []]
        rows = cur.fetchall()
    except duckdb.Error as exc:
        raise QueryError(f"query {name} failed for run {run_id}: {exc}") from None
    finally:
        cur.close()
    return Result(name, run_id, columns, rows)
