"""``runledger.stack.layout``: what a data directory records about its cluster."""

from __future__ import annotations

from runledger.stack.layout import new_cluster_id


def test_cluster_ids_never_look_like_an_option() -> None:
    ids = [new_cluster_id() for _ in range(5000)]  # a leading '-' is 1 in 64 without the rule
    assert not [c for c in ids if c.startswith("-")]
    assert all(len(c) == 22 for c in ids) and len(set(ids)) == len(ids)
