"""DCP's fsspec reader and writer, wherever this torch build keeps them.

``torch.distributed.checkpoint.fsspec_filesystem`` is the public name, but
some builds ship only the private module behind it (torch 2.11.0+cu130 on the
GPU machine had no public alias): importing either keeps the worker importable
on both. ``worker.storage`` makes DCP's readers and writers from these.

Tested in tests/worker/test_commit.py and tests/test_gpu_check.py.
"""

from __future__ import annotations

try:
    from torch.distributed.checkpoint.fsspec_filesystem import FsspecReader, FsspecWriter
except ModuleNotFoundError:  # pragma: no cover - depends on the torch build
    from torch.distributed.checkpoint._fsspec_filesystem import (
        FsspecReader,
        FsspecWriter,
    )

__all__ = ["FsspecReader", "FsspecWriter"]
