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
- ``views``: what the commands show, computed from events or summaries
  (``status``, ``runs``, ``nodes``, ``logs``, ``audit verify``, ``query manifest``,
  ``checkpoint list``);
- ``current``: the local stack ``stack up`` remembered for every other command;
- ``nodekeys``: a node's key: ``node enroll`` (made and registered as
  ``node.<name>``), and the key ``runledger agent`` signs its reports with;
- ``specload``: what ``submit`` checks of a spec on the submitting machine;
- ``rehearse``: the rehearsals ``preflight``, ``pilot`` and ``drill``, and the
  terminal check they share: pure judges beside the shells that observe for them;
- ``interrupt``: Ctrl-C that always ends a command following the log;
- ``keylog``: the keys log from an admin's side (the ring it folds to, key records
  checked before writing); ``signer``: an operator's signed requests;
- ``logcopy``: a copy of the signed log in files, verified later without a broker;
- ``logfind``: where a worker's log is, found on the log (``logs`` and ``ui``);
- ``nodelog``: the node records on the log (``nodes``, ``preflight``, ``pilot``, ``ui``);
- ``rawlog``: the log as stored, raw bytes and headers, for checking signatures;
- ``ui``: ``runledger ui``, the read-only live view over the running system;
- ``metricsserver``: the HTTP server of ``controller|project|agent --metrics``;
- ``stack``: a local Apache Kafka (KRaft) cluster;
- ``demo``: ``runledger demo``, the whole system end to end on one machine.
"""

# pyproject.toml's version, here too so that `runledger --version` answers without
# scanning the installed distributions (tests/runledger/test_cli_imports.py checks
# the two agree).
__version__ = "0.1.0"
