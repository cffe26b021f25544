"""events: the domain kernel and the log. Imports nothing else of ours; never torch.

- ``model``: the event catalog (``EVENT_TYPES``); import any event class from it.
  The classes live by concern: ``base`` (``Header``, ``Member``, the ``Event`` base),
  ``requests``, ``facts`` (``runledger.runs``), ``reports``, ``commands``.
- ``state``, ``fold``: run state and the pure fold ``evolve(state, event)`` with verdicts.
- ``registry``, ``fingerprint``, ``convert``, ``codec``: the schema files, CRC-64-AVRO,
  Avro single-object encoding, schema resolution and upcasters.
- ``topics``: topic names and declared configs.
- ``kafka``: idempotent producer, transactional writer, consumer with explicit
  commits, and the quarantine for undecodable records.
- ``errors``: ``EventsError`` and its leaves.
"""
