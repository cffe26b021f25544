"""runledger: the command line, the local Kafka stack and the demo.

- ``cli``: the ``runledger`` console script: ``--help`` and ``--version``
  answered from ``commandtable`` with nothing else loaded, the rest handed to ``app``;
- ``commandtable``: every top-level command, in the order a user meets them,
  with the module that registers it and its summary; the root help;
- ``app``: the Typer application behind it: loads a command's module when that
  command is asked for, and is the one place where an error becomes a message
  and an exit status;
- ``commands``: one module per command or command group, each with ``register(app)``;
- ``config``: the shared edge: option types, configuration from the environment
  (``RUNLEDGER_HOME``, ``RUNLEDGER_BOOTSTRAP``, ``RUNLEDGER_DATASETS``) and the
  broker connection;
- ``errors``: :class:`~runledger.errors.RunledgerError`, the package's root
  error, and the exit-status table;
- ``runview``: what ``status`` and ``runs`` show, computed from events (pure);
- ``statusview``: ``status`` and ``runs`` from the run summaries (``runledger.status``);
  ``logview``: which worker log ``logs`` shows; ``nodeview``: what ``nodes`` shows;
- ``current``: the local stack ``stack up`` remembered for every other command;
- ``nodekeys``: a node's key: ``node enroll`` (made and registered as
  ``node.<name>``), and the key ``runledger agent`` signs its reports with;
- ``specload``: what ``submit`` checks of a spec on the submitting machine;
- ``preflight``: the rules of ``preflight`` (observations to rows and a verdict,
  pure); ``preflightio``: what it observes (nodes, storage probes, dataset
  objects, topics);
- ``drillplan``: the faults of ``drill`` and which a spec can show; ``drilljudge``:
  what a drill run showed (both pure); ``drillrun``: one fault on the live stack;
  ``drillview``: the drill's matrix as a table, JSON or HTML;
- ``interrupt``: Ctrl-C that always ends a command following the log;
- ``metricsserver``: the HTTP server of ``controller|project|agent --metrics``;
- ``stack``: a local Apache Kafka (KRaft) cluster;
- ``demo``: ``runledger demo``, the whole system end to end on one machine.
"""

# pyproject.toml's version, here too so that `runledger --version` answers without
# scanning the installed distributions (tests/runledger/test_cli_imports.py checks
# the two agree).
__version__ = "0.1.0"
