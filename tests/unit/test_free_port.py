"""free_port: a port a process started next may listen on."""

from __future__ import annotations

import socket

from service_runtime.processes import ephemeral_range_start, free_port


def test_a_free_port_lies_below_the_range_outgoing_connections_take() -> None:
    ports = {free_port("127.0.0.1") for _ in range(20)}
    assert all(10_000 <= port < ephemeral_range_start() for port in ports)
    assert len(ports) > 1  # chosen at random, so side by side starts rarely pick the same


def test_a_port_in_use_is_never_chosen() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port("127.0.0.1")))
        held.listen()
        taken = held.getsockname()[1]
        assert all(free_port("127.0.0.1") != taken for _ in range(200))
