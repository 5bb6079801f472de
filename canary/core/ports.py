"""Free TCP ports for the servers the canary starts (engines, routers, the load master) and for tests.

One rule for every caller: ports are chosen BELOW the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range). A port the kernel hands out for port 0 can be handed out
again to any other socket: an engine once bound its own ephemeral socket to the NIXL side-channel
port picked for its partner, whose handshake listener then died with "Address already in use".
Ports outside that range are never given out implicitly, so only a process that asks for one by
number can take it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

from canary.errors import CanaryError

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000
LOOPBACK = "127.0.0.1"


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for port-0 binds and outgoing connections (Linux default 32768-60999)."""
    try:
        low, high = (int(v) for v in EPHEMERAL_RANGE_FILE.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports free right now on host, chosen below the kernel's ephemeral range
    (above it when the range leaves too little room below)."""
    if count < 1:
        raise CanaryError(f"free_ports: count must be at least 1, got {count}")
    low, high = ephemeral_range()
    candidates = list(range(LOWEST_PORT, low)) if low - LOWEST_PORT >= 4 * count else []
    if not candidates:  # an unusual range: take what is above it
        candidates = list(range(high + 1, 65536))
    random.SystemRandom().shuffle(candidates)
    sockets: list[socket.socket] = []
    try:
        for port in candidates:
            if len(sockets) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
        if len(sockets) < count:
            raise CanaryError(f"only {len(sockets)} of {count} free ports outside the ephemeral range on {host}")
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port(host: str = LOOPBACK) -> int:
    """One port free right now on host (the rule of free_ports)."""
    return free_ports(1, host)[0]


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """Whether something listens on host:port (a TCP connect succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0
