"""The commit and fencing protocol, model-checked (docs/architecture.md, "The
protocol, model-checked").

- ``protocol.pml``: the Promela model of one run: the controller's fold and
  decisions, two generations of two members, storage that tears or fails
  writes, restore with verification and revocation; properties P1-P6 as
  assertions on ghost variables, liveness as an ltl claim, and one ``-D``
  mutant per rule.
- ``spin``: runs SPIN over it (``python -m proof.spin``) and reads pan's
  verdict, state counts and the property a failed assertion checks.

Tested in tests/proof/test_spin.py.
"""
