"""The queries package's one root exception."""

from __future__ import annotations


class QueryError(Exception):
    """A query that cannot be answered: unknown name, unknown run, missing database."""
