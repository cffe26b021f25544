"""dataplane: identity-stable samples in a deterministic, resumable order with exact mixing.

- ``documents``: what every user document shares (run specs in ``controller``
  too): canonical JSON, SHA-256 digests, and the ``field.path: problem`` list
  of one that failed validation (``InvalidDocument``).
- ``manifest``: the immutable dataset manifest (pydantic); its id is the digest
  of its canonical JSON.
- ``shards``: the ``rltok-v1`` tokenized-document format (token array plus
  offsets index, memory-mappable, range-readable through fsspec).
- ``catalog``: stored manifests and aliases (``corpus/latest`` -> id); building
  a manifest from shard files.
- ``home``: ``RUNLEDGER_HOME`` and its default, under which the default catalog
  lives (standard library only: ``runledger.config`` takes them from here).
- ``synth``: a deterministic synthetic multi-source corpus for tests and the demo.
- ``permute``: the keyed O(1)-memory Feistel permutation and identity hashes.
- ``mixing``: pure source-selection rules (exact EDF quotas, expected categorical).
- ``order``: the pure planner: mixing, per-source epochs, transforms, packing; its
  ``plan_batch`` loop runs in compiled code (``runledger_native.OrderCore``) when
  the crate is built.
- ``state``: the strict, versioned loader state and the cursor a checkpoint commits.
- ``store``: checked physical reads of manifest objects.
- ``pipeline``: bounded parallel fetch with in-order emission, and its metrics.
- ``rows``: a chunk of planned sequences assembled into batch rows in one pass.
- ``planahead``: without the compiled loop, the order planned ahead in a child
  process (``python -m dataplane.planahead``), the planner's batches bit for bit.
- ``loader``: what a training rank iterates; provisional cursors and commit.
- ``errors``: ``DataPlaneError`` and its leaves (``ManifestError`` is also an
  ``InvalidDocument``).

Imports nothing else of ours, so a training script can use the loader without
Kafka; ``worker`` and ``controller`` import it.
"""
