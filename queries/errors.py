"""The queries package's one root exception.

Tested in tests/queries/test_queries.py and tests/queries/test_report.py.
"""

from __future__ import annotations


class QueryError(Exception):
    """A query that cannot be answered: unknown name, unknown run, missing database."""
