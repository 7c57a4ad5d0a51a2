"""free_port: a port a process started next may listen on."""

from __future__ import annotations

import socket

import pytest

from service_runtime.ports import LISTEN_PORTS_ENV, ephemeral_range_start, free_port, listen_ports


def test_a_free_port_lies_below_the_range_outgoing_connections_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LISTEN_PORTS_ENV, raising=False)
    ports = {free_port("127.0.0.1") for _ in range(20)}
    assert all(10_000 <= port < ephemeral_range_start() for port in ports)


def test_a_port_in_use_is_never_chosen() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port("127.0.0.1")))
        held.listen()
        taken = held.getsockname()[1]
        assert all(free_port("127.0.0.1") != taken for _ in range(200))


def test_picks_before_any_bind_never_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack picks all its ports before its first process binds one."""
    monkeypatch.setenv(LISTEN_PORTS_ENV, "20000-20199")
    picked = [free_port("127.0.0.1") for _ in range(60)]
    assert len(set(picked)) == 60
    assert all(20_000 <= port <= 20_199 for port in picked)


def test_when_most_of_a_share_was_picked_the_oldest_picks_are_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LISTEN_PORTS_ENV, "22000-22009")
    picked = [free_port("127.0.0.1") for _ in range(30)]
    assert all(22_000 <= port <= 22_009 for port in picked)
    assert len(set(picked[-4:])) == 4  # the newest picks still differ


def test_a_process_picks_only_from_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LISTEN_PORTS_ENV, "21000-21999")
    assert listen_ports() == range(21_000, 22_000)
    assert all(21_000 <= free_port("127.0.0.1") <= 21_999 for _ in range(100))


def test_a_malformed_share_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LISTEN_PORTS_ENV, "20000")
    with pytest.raises(ValueError, match=LISTEN_PORTS_ENV):
        listen_ports()
