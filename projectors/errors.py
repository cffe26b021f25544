"""The projectors package's exceptions: one root, caught once at the CLI edge.

Tested in tests/projectors/test_projector.py.
"""

from __future__ import annotations


class ProjectorError(Exception):
    """Root of every error raised by the ``projectors`` package."""


class ProjectionLayoutError(ProjectorError):
    """A projection file whose tables another runledger version made."""


class ProjectionGap(ProjectorError):
    """Records the projection still needed were deleted from the log: it stops, naming them."""
