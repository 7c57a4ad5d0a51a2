"""Picking a port for a process that is started next and listens on it.

A picked port is free when picked and stays free only until somebody else binds
it, so picks avoid three kinds of neighbour: outgoing connections (ports are
taken below the kernel's ephemeral range, from which the kernel hands them out),
earlier picks of the same process (never handed out twice while others remain),
and other processes picking side by side (TEXERA_LAKE_LISTEN_PORTS gives each
its own share, for example "10000-17499"; children inherit it).
"""

from __future__ import annotations

import functools
import os
import random
import socket
from pathlib import Path

#: Where picks start by default, up to the start of the kernel's ephemeral range.
LISTEN_PORTS_FROM = 10_000
#: The inclusive range "first-last" this process picks listen ports from.
LISTEN_PORTS_ENV = "TEXERA_LAKE_LISTEN_PORTS"

#: The ports this process picked, oldest first.
_handed_out: dict[int, None] = {}


@functools.cache  # a kernel setting: read once
def ephemeral_range_start() -> int:
    """The first port of the range the kernel gives outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def listen_ports() -> range:
    """The ports picks come from: TEXERA_LAKE_LISTEN_PORTS, or those below the ephemeral range;
    empty when neither leaves room."""
    configured = os.environ.get(LISTEN_PORTS_ENV, "").strip()
    if configured:
        first, _, last = configured.partition("-")
        try:
            return range(int(first), int(last) + 1)
        except ValueError:
            raise ValueError(f"{LISTEN_PORTS_ENV} must be first-last, got {configured!r}") from None
    below = ephemeral_range_start()
    return range(LISTEN_PORTS_FROM, below) if below - LISTEN_PORTS_FROM >= 1_000 else range(0)


def port_in_use(host: str, port: int) -> bool:
    """Whether a server could not bind port on host now (bound as servers bind, with
    SO_REUSEADDR, so a port whose last connection is in TIME_WAIT counts as free)."""
    with socket.socket() as probe_socket:
        probe_socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe_socket.bind((host, port))
        except OSError:
            return True
    return False


def _forget_oldest(ports: range) -> None:
    """Keeps fewer than half of ports remembered as picked, forgetting the oldest picks first,
    so that a random search among the rest stays short."""
    picked = [port for port in _handed_out if port in ports]
    for port in picked[: max(0, len(picked) - len(ports) // 2 + 1)]:
        del _handed_out[port]


def free_port(host: str) -> int:
    """A port on host that nothing listens on now and that this process has not picked before
    (while its range has others left), for a process started next to listen on."""
    ports = listen_ports()
    _forget_oldest(ports)
    for port in random.sample(ports, min(len(ports), 40)):
        if port not in _handed_out and not port_in_use(host, port):
            _handed_out[port] = None
            return port
    with socket.socket() as probe_socket:
        probe_socket.bind((host, 0))
        return int(probe_socket.getsockname()[1])
