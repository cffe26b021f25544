"""The run spec: the YAML document that binds everything a run depends on.

Validated completely before anything reaches the log, and read again by the
controller from the logged ``spec_json`` (an old log or a forged record gets a
spec error, never a crash):

- ``runspec``: the document (pydantic): ``RunSpec``, ``load_spec``,
  ``parse_spec_json``; a dataset alias is resolved while parsing;
- ``parts``: its sections: topology, membership, budget, retry, heartbeat,
  checkpoint, alerts;
- ``sdc``: its ``sdc`` section, the silent-data-corruption detectors;
- ``bounds``: the range of every number in it, and why each bound is where it is;
- ``text``: its text, read safely (bounded size, nesting and aliases).

The reconcile core reads none of this directly: ``controller.runplan`` turns an
accepted spec into the plain values it acts on.
"""
