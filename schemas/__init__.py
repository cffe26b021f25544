"""Avro schema files, one per event type and version: ``<Type>.v<N>.avsc``.

Data only. A released file is never edited; a change is a new version file
that every older writer's data must still resolve into (see
``tests/events/test_compat.py``). Any Avro implementation can decode runledger
records with these files alone.
"""
