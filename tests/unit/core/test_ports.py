"""canary.core.ports: free ports below the kernel's ephemeral range, real sockets on loopback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from canary.core import ports
from canary.errors import CanaryError


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low, _ = ports.ephemeral_range()
    chosen = ports.free_ports(8)
    assert len(set(chosen)) == 8
    assert all(ports.LOWEST_PORT <= p < low for p in chosen)
    held = []
    try:
        for port in chosen:  # every one can be bound by number right now
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind((ports.LOOPBACK, port))
    finally:
        for sock in held:
            sock.close()


def test_port_in_use_sees_a_listener_and_its_absence() -> None:
    port = ports.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind((ports.LOOPBACK, port))
        listener.listen()
        assert ports.port_in_use(port)
    assert not ports.port_in_use(port)


def test_an_unusual_range_takes_ports_above_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("10001\t60000\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", range_file)
    assert ports.ephemeral_range() == (10001, 60000)
    assert all(p > 60000 for p in ports.free_ports(3))


def test_an_unreadable_range_falls_back_to_the_linux_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert ports.ephemeral_range() == (32768, 60999)


def test_a_count_below_one_is_refused() -> None:
    with pytest.raises(CanaryError, match="count must be at least 1, got 0"):
        ports.free_ports(0)
