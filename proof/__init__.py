"""The commit and fencing protocol, checked three ways (docs/architecture.md §17).

The model, model-checked:

- ``protocol.pml``: the Promela model of one run: the controller's fold and
  decisions, two generations of two members, storage that tears or fails
  writes, restore with verification and revocation; properties P1-P6 as
  assertions on ghost variables, liveness as an ltl claim, one ``-D`` mutant
  per rule, and a ``printf`` line per decision for the trace replay;
- ``spin``: runs SPIN over it (``python -m proof.spin``) and reads pan's
  verdict, state counts, the property a failed assertion checks and the
  counterexample's trace lines.

The model tied to the code:

- ``traces``: SPIN's random simulations (``python -m proof.traces``) and the
  mutants' trails replayed against the real controller core, verdict by
  verdict.

The real core under deterministic simulation (``python -m proof.sim``):

- ``sim``: the driver: one seeded random source picks every step and fault;
  the real ``handle``, ``tick``, ``replay`` and ``agent.decide`` decide;
- ``world``: the modelled log, storage, workers and agents, as plain data,
  and who miscomputed which step (silent data corruption);
- ``actors``: what a worker or an agent does in one step (the group's
  agreement check, its suspicion and its replay among them);
- ``props``: P1-P6, ETTR closure step by step, replay equals live;
- ``truth``: the log against what the world knows: a fresh fold accepts every
  fact, the cursor follows commits, whole gangs, a commit's own shards, the old
  generation stopped before the next, corruption verdicts as the world knows
  them, progress (no hang);
- ``verdicts``: the truth about a failure's verdict: hangs and stalls, the
  job's own errors, confirmations, successes, failure quarantines, and the
  wait for a suspicion;
- ``cadence``: the automatic checkpoint interval's rule from the facts, and
  the truth that holds each interval change and start command to it;
- ``nodes``: operators' requests and the nodes' cordons: node operations by
  epoch, a request taken once, placements kept off cordons;
- ``ettr``: ETTR closure by the real query over a seed's projected log, and
  each part against the documented rules' labels;
- ``plant``: known bugs to plant in the real core, which the simulator must find;
- ``mutants``: one-line mutants of the pure core's rules, generated from its
  source, and which of them the simulation and the traces kill;
- ``swap``: one function's code swapped in place for a block (every caller
  runs it), which the mutants and the source-patched plants use;
- ``errors``: ``ProofError``, the package's one root exception.

Tested in tests/proof/test_spin.py, tests/proof/test_traces.py,
tests/proof/test_sim.py, tests/proof/test_truth*.py, tests/proof/test_cadence.py and
tests/proof/test_mutants.py.
"""
