"""agent: the node agent, one process per node, between the command log and the workers.

- ``decide``: the pure decisions (numbered rules, a closed set of frozen
  actions) about a start or stop command, given the agent's memory;
  ``confine``: its rule of what a start may name, run and point at (roots,
  workdirs, loader variables under ``--allow``);
- ``allow``: ``--allow`` judged by file: each entry's real path at start, and a
  command's ``argv[0]`` found at launch as the exec finds it;
- ``applied``: the node's durable memory of the commands it applied (an
  fsynced, append-only file in its work directory), loaded first by a
  restarted agent so a replayed start launches nothing twice;
- ``verify``: what a command must pass before ``decide`` sees it (a live
  controller key's signature from the keys log, and for a start the fact
  log's current generation), and the shell that reads both;
- ``service``: the process loop (class ``Agent``) that reads
  ``runledger.commands``, performs those actions and reports registration,
  heartbeats and worker exits to ``runledger.reports``, its workers started
  from the worker role's credentials (never the agent's);
- ``beats``: node-aggregated liveness: its workers' beat files read every
  interval and sent as one ``MembersHeartbeatRecorded`` per run and generation;
- ``node``: what the agent says about its node, each report signed with the
  node's own key (``events.kafka.reportdoor``), its torch version, and the node's
  state it logs at start (read from the controller's facts);
- ``nodestate``: the line an agent logs about its node when it starts (ready,
  cordoned, quarantined), over ``events.nodefold``, the one fold of a node's
  facts, which the controller's inventory reads too;
- ``procs``: the table of worker processes (launch, terminate with a grace
  period, reap), each run's workers given a run key the node key certifies for
  that run and generation alone (``events.kafka.runkeys``);
- ``logrelay``: the process between a worker's output pipe and its log file,
  rotating the file at a cap so the output stays bounded on disk; ``logfiles``:
  the rotated files read as one (an exit's last output, ``runledger logs``);
- ``stats``: what the agent counts as it works (heartbeats, commands by
  decision, worker exits by outcome, bytes the log cap dropped); ``metrics``:
  its Prometheus collector over them and its state (``runledger agent --metrics``);
- ``sweep``: after a stop, the stopped generations' manifest-less checkpoint
  directories (staging residue no commit can vouch for), removed once this
  node's workers of them exited;
- ``testworker``: a torch-free stand-in worker with deterministic failures,
  run as ``python -m agent.testworker`` by the tests;
- ``errors``: ``AgentError``, the package's one root exception.

The worker environment contract the agent writes lives in
``events.workerenv``; this package imports only ``events``.
"""
