"""The controller package's exceptions: one root, specific leaves.

Callers at the edge (the CLI, the controller process) catch
:class:`ControllerError` and print its message as it stands, so every message
must read well on its own, without a traceback.

Tested in tests/controller/spec/test_runspec.py and tests/dataplane/test_documents.py.
"""

from __future__ import annotations

from dataplane.documents import DocumentKind, InvalidDocument


class ControllerError(Exception):
    """Root of every error raised by the ``controller`` package."""


# The tags pydantic puts into error locations of the spec's unions
# (controller.spec.parts: Membership by ``kind``, CheckpointPolicy by ``policy``);
# dropped when naming a field, since the user wrote ``membership.min``, not
# ``membership.elastic.min``.
RUN_SPEC = DocumentKind("run spec", "(spec)", union_tags={
    "membership": frozenset({"fixed", "elastic"}),
    "checkpoint": frozenset({"fixed", "auto"}),
})


class SpecError(InvalidDocument, ControllerError):
    """A run spec that cannot be accepted; ``problems`` names every bad field.

    The message and ``problems`` are those of every invalid user document
    (:class:`dataplane.documents.InvalidDocument`).
    """

    kind = RUN_SPEC
