"""The proof package's one root exception; the CLI edge (``main`` of each module) catches it.

Tested in tests/proof/test_spin.py.
"""

from __future__ import annotations


class ProofError(Exception):
    """A proof tool could not run (SPIN missing, pan without a verdict), or a check failed."""
