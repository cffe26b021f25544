"""What the command line shows, computed from events or summaries. Pure, except where said.

- ``runview``: what ``status`` and ``runs`` show, folded from a run's events;
- ``statusview``: ``status`` and ``runs`` from the run summaries
  (``runledger.status``), and their filters;
- ``nodeview``: what ``nodes`` shows, folded from the node facts;
- ``logview``: which worker log ``logs`` shows and where its file is;
- ``auditview``: ``audit verify``'s report as lines or JSON;
- ``manifestview``: ``query manifest``: the post-run manifest rebuilt from the log
  and checked (reads the log: the one view here with I/O);
- ``ckpttiers``: ``checkpoint list``: a run's checkpoints per storage tier, from
  the log.

The live view (``runledger.ui``) reuses ``statusview`` and ``nodeview``.
"""
