"""``runledger demo``: the whole system end to end on one machine.

- ``run``: :func:`run_demo`, the sequence, and the :class:`Summary` it returns;
- ``setup``: the demo's options, the work directory's layout, the corpus and the spec;
- ``procs``: the OS processes it starts and stops, and one-shot CLI calls;
- ``watch``: following the run on the log while the demo waits on it.
"""
