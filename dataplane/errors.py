"""The data plane's exceptions: one root, specific leaves.

Each message names what is wrong (the field, the source and object, the state
key) so it reads well on its own at the command line or in a worker's log.

Tested in tests/dataplane/test_documents.py, tests/dataplane/test_loader.py and
tests/dataplane/test_order.py.
"""

from __future__ import annotations

from dataplane.documents import DocumentKind, InvalidDocument


class DataPlaneError(Exception):
    """Root of every error raised by the ``dataplane`` package."""


DATASET_MANIFEST = DocumentKind("dataset manifest", "(manifest)")


class ManifestError(InvalidDocument, DataPlaneError):
    """A dataset manifest that cannot be accepted; ``problems`` lists every bad field."""

    kind = DATASET_MANIFEST


class CatalogError(DataPlaneError):
    """A manifest id or alias that the catalog does not hold, or a stored copy that was altered."""


class DataFault(DataPlaneError):
    """Stored data disagrees with its manifest: missing object, size or digest
    mismatch, a record outside its logical range, an object outside the access scope.

    Never skipped silently: the sample would be a different sample.
    """

    def __init__(self, source: str, obj: str, detail: str) -> None:
        self.source = source
        self.object = obj
        self.detail = detail
        super().__init__(f"data fault in source {source!r}, object {obj!r}: {detail}")


class SourceExhausted(DataPlaneError):
    """A source ran out under the ``error`` exhaustion policy."""

    def __init__(self, source: str, epoch: int) -> None:
        self.source = source
        self.epoch = epoch
        super().__init__(
            f"source {source!r} is exhausted after epoch {epoch} and the mixture's"
            " exhaustion policy is 'error'"
        )


class StateError(DataPlaneError):
    """A loader state that does not belong to this dataset, algorithm or configuration."""


class ConfigError(DataPlaneError):
    """A loader configuration that cannot work (for example a batch that replicas cannot split)."""
