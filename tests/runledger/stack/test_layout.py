"""``runledger.stack.layout``: what a data directory records about its cluster, and
the port checks ``stack up`` and ``stack down`` rely on."""

from __future__ import annotations

import socket
import threading

from runledger.stack.layout import (
    HOST,
    new_cluster_id,
    pick_free_ports,
    port_free,
    wait_ports_free,
)


def test_cluster_ids_never_look_like_an_option() -> None:
    ids = [new_cluster_id() for _ in range(5000)]  # a leading '-' is 1 in 64 without the rule
    assert not [c for c in ids if c.startswith("-")]
    assert all(len(c) == 22 for c in ids) and len(set(ids)) == len(ids)


def test_a_listening_port_is_in_use_until_closed_and_waiting_sees_it_freed() -> None:
    port = pick_free_ports(1)[0]
    assert port_free(port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, port))
    sock.listen()
    assert not port_free(port)
    assert not wait_ports_free([port], 0.3)  # still held: gives up, says so
    closer = threading.Timer(0.5, sock.close)
    closer.start()
    try:
        assert wait_ports_free([port], 30.0)  # the moment it is closed
    finally:
        closer.cancel()
        sock.close()
    assert port_free(port)
