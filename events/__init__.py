"""events: the domain kernel, and its Kafka and signing edges. Imports nothing else of ours;
never torch.

- ``model``: the event catalog (``EVENT_TYPES``); import any event class from it.
  The classes live by concern: ``base`` (``Header``, ``Member``, the ``Event`` base),
  ``requests``, ``facts`` (``runledger.runs``), ``reports``, ``commands``,
  ``principals`` (key records, ``runledger.keys``).
- ``state``, ``fold``: run state and the pure fold ``apply(state, event)`` with
  verdicts (docs/architecture.md §5), with the informational records' rules in
  ``fold_info``, pause and resume in ``fold_pause`` and the open corruption
  suspicion in ``fold_sdc``; ``fence``: the fold's answer to a follower
  without state, whether a generation may still publish (§6); ``shelf``: the
  immutable map that is cheap to change a key at a time (per-member and per-node
  maps of 10^5 entries).
- ``registry``, ``fingerprint``, ``convert``, ``codec``: the schema files, CRC-64-AVRO,
  Avro single-object encoding, schema resolution and upcasters; ``intrange``: the
  32-bit check of Avro ``int`` fields the codec applies both ways; ``placement``:
  a generation's members on the wire as blocks of a node's slots, packed and
  unpacked by the codec; ``columnar``: the compiled read path, a batch of record
  values to one Arrow record batch per type (the Rust crate in ``native/``, found by
  ``compiled``, None where it is not built).
- ``topics``: topic names and declared configs; ``partition``: the murmur2
  placement every producer shares (co-partitioned topics, one owner per run).
- ``authority``: who may say what (each type's topic and sending role), size
  limits, and the controller's door (``admit_input``); ``names``: the charset of
  run ids, node names, logical ids and aliases, and path confinement.
- ``recovery``: RPO per failure domain, a pure fold of a run's progress and
  checkpoint copies (the controller's ``rpo_violated`` alert and the ``recovery``
  query both read it).
- ``beatfile``: the beat file a worker writes its heartbeats to and its agent
  reads (node-aggregated liveness);
- ``workerenv``: the environment contract between the controller, the agent and
  a worker process.
- ``launch``: where a worker runs and which program it runs, the check ``submit``
  and the agent both make before a launch;
- ``limits``: the one record size limit (librdkafka's 1,000,000 bytes) and what
  it leaves a request and a spec once the controller's copy adds its headers.
- ``record``: the decoded ``Record`` a reader hands out, with its place in the
  log, and ``Quarantined``, where an undecodable one sat and why.
- ``status``: a run's status summary (``RunStatusChanged``, a derived view on the
  compacted ``runledger.status``, not a fact).
- ``nodefold``: the one pure fold of a node's facts (cordoned, drained,
  quarantined, on probation), which the agent and the controller both read.
- ``sdc``, ``sdcenv``: silent data corruption: the suspicion, the replay and the
  verdict, and the settings a worker gets from its environment;
  ``runmanifest``: the post-run manifest, built purely from a run's facts;
  ``workerlog``: where a worker's log lies under its agent's work dir.
- ``keyids``: key ids and sizes, which the event model checks without loading
  any cryptography.
- ``errors``: ``EventsError`` and its leaves.

Everything above is the pure kernel. Two edges stand apart in subpackages, and
the kernel imports neither (``tests/test_layout.py``):

- ``kafka``: everything that talks to a broker: the producer and the
  quarantine, the one group-less reader, the status reader, the consumer group,
  the controller's transactions, the live key ring (read on from where it
  stopped), run keys and the report door;
- ``signed``: Ed25519 signing, the key ring's pure fold and signature judge, the
  offline audit of the signed log and the heads an exported copy carries.
"""
