"""Rehearsals: what a user runs before (and after) trusting the system with a real run.

Each rehearsal is a pure judge beside the thin shell that observes for it:

- ``preflight``: the rules of ``runledger preflight`` (observations to rows and a
  verdict, pure); ``preflightio``: what it observes (nodes, storage probes,
  dataset objects, topics);
- ``trialplan``: a trial run's spec derived from the user's (small, short,
  labelled, maybe faulty; pure); ``trial``: running one on the live stack
  (submit, watch, cancel, find its workers);
- ``pilot``: what ``runledger pilot`` concludes from its trial run's events (pure);
- ``drillplan``: the faults of ``runledger drill`` and which a spec can show;
  ``drilljudge``: what a drill run showed (both pure); ``drillrun``: one fault on
  the live stack; ``drillview``: the drill's matrix as a table, JSON or HTML;
- ``terminalcheck``: whether a run's end left what it must and no more (pure),
  used by the drill and the pilot.

The commands that run them are ``runledger.commands.preflight``, ``pilot`` and
``drill``.
"""
