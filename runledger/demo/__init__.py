"""``runledger demo``: the whole system end to end on one machine, in about two minutes.

- ``run``: :func:`run_demo`, the sequence (broker, corpus, services, the run
  with its injected kill and recovery, projection, queries, report) and the
  :class:`Summary` it returns;
- ``setup``: the demo's inputs: :class:`DemoOptions`, the work directory's
  layout, the corpus and the run spec;
- ``procs``: the OS processes it starts and stops, and one-shot CLI calls;
- ``watch``: following the run on the log while the demo waits on it.

Its own errors are ``DemoError`` (a :class:`~runledger.errors.RunledgerError`); Ctrl-C and
SIGTERM end it with :class:`~runledger.errors.Interrupted` once everything is stopped.
"""
