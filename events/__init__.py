"""events: the domain kernel and the log. Imports nothing else of ours; never torch.

- ``model``: the event catalog (``EVENT_TYPES``); import any event class from it.
  The classes live by concern: ``base`` (``Header``, ``Member``, the ``Event`` base),
  ``requests``, ``facts`` (``runledger.runs``), ``reports``, ``commands``,
  ``principals`` (key records, ``runledger.keys``).
- ``state``, ``fold``: run state and the pure fold ``apply(state, event)`` with
  verdicts (docs/architecture.md §5), with the informational records' rules in
  ``fold_info``, pause and resume in ``fold_pause`` and the open corruption
  suspicion in ``fold_sdc``; ``fence``: the fold's answer to a follower
  without state, whether a generation may still publish (§6).
- ``registry``, ``fingerprint``, ``convert``, ``codec``: the schema files, CRC-64-AVRO,
  Avro single-object encoding, schema resolution and upcasters; ``intrange``: the
  32-bit check of Avro ``int`` fields the codec applies both ways.
- ``topics``: topic names and declared configs; ``partition``: the murmur2
  placement every producer shares (co-partitioned topics, one owner per run).
- ``authority``: who may say what (each type's topic and sending role), size
  limits, and the controller's door (``admit_input``); ``names``: the charset of
  run ids, node names, logical ids and aliases, and path confinement.
- ``recovery``: RPO per failure domain, a pure fold of a run's progress and
  checkpoint copies (the controller's ``rpo_violated`` alert and the ``recovery``
  query both read it).
- ``workerenv``: the environment contract between the controller, the agent and
  a worker process.
- ``launch``: where a worker runs and which program it runs, the check ``submit``
  and the agent both make before a launch;
- ``limits``: the one record size limit (librdkafka's 1,000,000 bytes) and what
  it leaves a request and a spec once the controller's copy adds its headers.
- ``kafka``: idempotent producer, the decoded ``Record``, the quarantine for
  undecodable or refused records, and the one decode-or-quarantine step;
  ``transactions``: the controller's ``TransactionalWriter``; ``broker``: the
  bootstrap address and whether a broker answers.
- ``reader``: ``LogReader``, the one group-less reader (assignment from the
  beginning, the end or stored offsets; positions; end of log; quarantine), and
  ``Watermarks``; ``offsets``: where it starts, and ``LogGap``, the records
  deleted below a stored offset or a lagging position, named, never skipped.
- ``status``, ``statuslog``: a run's status summary (``RunStatusChanged``, a derived
  view on the compacted ``runledger.status``, not a fact) and reading it back;
- ``consume``: ``EventConsumer``, a consumer-group member with explicit commits,
  and ``read_log`` (a dump or a tail of one topic, over ``LogReader``).
- ``signing``: Ed25519 keys, the domain-separated message each use signs, fact
  and key-record digests (each run's hash chain, and the keys log's) and the
  signature headers; ``keyids``: key ids and sizes, which the event model checks
  without loading any cryptography; ``keyring``: the pure fold of key records and the one
  signature judge (``check``); ``audit``: offline verification of the keys log
  and every run's signed chain; ``loghead``: the signed heads an exported copy
  carries, judged against the copy; ``keys``: the ring read live from
  ``runledger.keys``; ``reportdoor``: the one door of agents' reports (believed
  about node N only under ``node.N``'s live agent key), which the controller's
  inputs, its follower and ``runledger nodes`` share.
- ``errors``: ``EventsError`` and its leaves.
"""
