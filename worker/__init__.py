"""worker: what runs inside a training process on a GPU node.

- ``session``: the ``Session`` a training script uses (restore, step, checkpoint).
- ``trainstate``: the attached components (model, optimizer, ``Stateful`` scheduler
  and scaler, a ``Loader``) and the per-rank state dict a checkpoint holds.
- ``reporter``: reports and heartbeats from a background thread.
- ``watcher``: follows ``runledger.runs`` for verdicts, interval changes, fencing.
- ``commit``: writing one checkpoint with torch.distributed.checkpoint, manifest last;
  ``crcwrite``: the CRC32C of each file taken as DCP writes it.
- ``restore``: verifying committed checkpoints before loading, with fallback;
  ``verified``: each shard read once, checked, and loaded from the checked bytes.
- ``persist``: async staging and the bounded background writer; ``jobs``: the one
  background job loop it and ``tiers`` (copies to other storage tiers) run on.
- ``manifest``, ``layout``, ``storage``: the checkpoint manifest, paths, fsspec I/O;
  ``dcpfs``: DCP's fsspec reader and writer under either of torch's module names.
- ``gc``: bounded, retryable garbage collection of checkpoints.
- ``sdc``, ``sdcstep``: the silent-data-corruption detectors ``step`` runs before it
  reports (fingerprints agreed across replicas, digests, invariants) and their reports.
- ``comm``, ``rng``, ``faults``, ``bitflip``, ``errors``: collectives, RNG streams, fault
  injection (a flipped bit among them), ``WorkerError`` and its leaves.

Depends on ``events`` and ``dataplane``; never on ``controller``.
"""
