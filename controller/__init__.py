"""controller: run specs, the pure reconcile core, and the process that appends facts.

The contract is docs/architecture.md §7. Pure core first, then the shell:

- ``spec``: the run spec (pydantic, YAML), a package of its own (the document, its
  sections, their bounds, the safe text reader), validated completely before
  anything reaches the log; a dataset alias is resolved while parsing.
- ``runplan``: the parts of a spec the core acts on, as plain values.
- ``model``: the controller's model and ``Draft.absorb``, the one update path
  for every record (inputs, the controller's own facts, and replay on restart);
  finished runs, nodes and members live in ``events.shelf`` maps, cheap to change.
- ``inputs``: what the controller does with each type of request and report.
- ``run_decide``: a run's lifecycle decisions (admit, start, restart, classify,
  confirm, finish) as numbered rules and a closed set of frozen actions.
- ``reconcile``: ``handle`` an input, ``tick`` the clock, ``reconcile_run`` one
  run; ``emitter``: the outputs of one step, folded into the model as emitted.
- ``admission``, ``inventory``: gang placement against the nodes agents offer;
  ``gates``: a spec's admission gates and the gate book of evidence rule 2 reads,
  which ``evidence`` (a shell) reads from every partition of ``requests``.
- ``node_decide``: an operator's cordon, uncordon or drain and a quarantine's expiry.
- ``replays``: an operator's request is taken once (a copy is refused as
  ``replayed``) and node operations apply in order (``superseded``), judged on
  the request ids and node epochs the model folds from the facts.
- ``policy``: failure classification and the retry policy.
- ``exits``: the current generation's exit evidence (log path, output tail, launch
  error, before or after the first step, whose sessions closed) the policy judges
  with; ``liveness``: which silent member is hung (exit beats timeout).
- ``sdc_verdict``: the verdict on a corruption suspicion from its replay, and
  where the replay runs.
- ``checkpoints``: commit, revocation and the auto interval; ``interval``:
  Young's and Daly's arithmetic behind ``runledger interval``.
- ``alerts``, ``watch``: the alert rules, their actions (notify, pause,
  escalate) and what they watch per run.
- ``roots``: where the controller may write (``--allow-root``): a spec's checkpoint
  root judged at admission, and each file path again at the write, which
  ``manifests`` (a shell) does for a run's ``run-manifest.json``.
- ``service``: the process shell (transactions, fencing, the consume loop);
  ``metrics``: its Prometheus collector; ``latency``: the histogram of the wait
  from each report to the commit of its facts, which the shell fills; ``fit``:
  whether what an input makes it append fits one Kafka record once signed
  (``too_large`` otherwise); ``trust``: whom it believes (the request judge of
  ``signatures``, read again as keys change, and the one door of agents'
  reports, ``events.kafka.reportdoor``).
- ``changelog``: the status summaries a cycle appends to ``runledger.status`` in its
  transaction; ``narrate``: the log line for each record the controller appends.
- ``errors``: ``ControllerError`` and its leaves.

Imports ``events`` and, for documents and dataset manifests, ``dataplane``.
"""
