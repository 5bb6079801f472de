"""When the bytes of a streamed response reached this host: kernel receive timestamps per read.

A timestamp taken in user space after `recv` returns says when the client got round to the
bytes, not when they arrived: on a busy machine the gevent loop's and the OS scheduler's delay
(a different one for every read) lands on every token, and inter-token gaps come out jittered by
the client itself. Linux stamps each received packet in its network stack and, for a TCP socket
with SO_TIMESTAMPNS set, hands `recvmsg` the stamp of the last packet of the read (CLOCK_REALTIME);
`StampedLines` turns that into `time.perf_counter` time (the clock of every other client
timestamp) and gives it to every line that read completed. Where the kernel gives no stamp (not
Linux, not TCP, an old packet), the read's own user-space time is used, as before.

Tokens that arrive while the client is busy still share one stamp (TCP merges queued packets and
keeps the last stamp): an upper bound of their arrival, never later than a user-space stamp.

Plain Python (socket, struct, time): the response object only has to look like geventhttpclient's
`HTTPSocketResponse` (its socket, its parsed-body buffer, its parser's `feed`).
"""

from __future__ import annotations

import platform
import socket
import struct
import sys
import time
from collections.abc import Iterator
from typing import Protocol

# SO_TIMESTAMPNS(_OLD) of Linux's asm-generic/socket.h (a struct timespec of two longs); the
# architectures with their own numbering (mips, sparc, parisc, alpha) and 32-bit ones get no stamps
_GENERIC_64BIT = {"x86_64", "aarch64", "riscv64", "ppc64le", "ppc64", "s390x"}
SO_TIMESTAMPNS: int | None = 35 if sys.platform == "linux" and platform.machine() in _GENERIC_64BIT else None
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
BLOCK_SIZE = 1 << 16  # one read takes whatever has arrived (a token event is ~200 bytes)


class StampSocket(Protocol):
    """What a stamped read needs of a socket (a stdlib or a gevent socket)."""

    def setsockopt(self, level: int, optname: int, value: int, /) -> None: ...

    def recv(self, bufsize: int, /) -> bytes: ...

    def recvmsg(self, bufsize: int, ancbufsize: int, /) -> tuple[bytes, list[tuple[int, int, bytes]], int, object]: ...


class ParsedResponse(Protocol):
    """The parts of geventhttpclient's HTTPSocketResponse that reading its body uses."""

    _sock: StampSocket | None
    _body_buffer: bytearray
    message_complete: bool

    def feed(self, data: bytes) -> None: ...

    def release(self) -> None: ...


_KEEPER: socket.socket | None = None


def keep_stamping() -> bool:
    """Keep the kernel stamping received packets for as long as this process runs; False where it cannot.

    Linux stamps packets on arrival only while some socket of the machine wants stamps, and a
    connection asks only when its response is read, after its first bytes may have come: one idle
    UDP socket of this process that wants stamps keeps the stamping on, so those bytes carry theirs.
    """
    global _KEEPER
    if _KEEPER is None and SO_TIMESTAMPNS is not None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if enable(sock):
            _KEEPER = sock
        else:
            sock.close()
    return _KEEPER is not None


def enable(sock: StampSocket) -> bool:
    """Ask the kernel to stamp the socket's received packets; False where it cannot."""
    if SO_TIMESTAMPNS is None or not hasattr(sock, "recvmsg"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def kernel_stamp(ancillary: list[tuple[int, int, bytes]], now: float, wall_ns: int) -> float | None:
    """A recvmsg SO_TIMESTAMPNS stamp as perf_counter time, given perf_counter and time_ns read together.

    None when there is no stamp, or one that cannot be an arrival time: after `now` (the wall clock
    was stepped back) or unset (0).
    """
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(payload)
            if sec <= 0:
                return None
            age_ns = wall_ns - (sec * 1_000_000_000 + nsec)
            return now - age_ns / 1e9 if age_ns >= 0 else None
    return None


def receive(sock: StampSocket, stamped: bool) -> tuple[bytes, float, float | None]:
    """One read of whatever has arrived (up to BLOCK_SIZE): the bytes, the read's own perf_counter
    time and, on a socket `enable`d for stamps, the kernel's receive stamp in perf_counter time
    (None where the kernel gave none). Raises what the socket's recv raises (BlockingIOError on a
    non-blocking socket with nothing to read)."""
    if not stamped:
        return sock.recv(BLOCK_SIZE), time.perf_counter(), None
    data, ancillary, _flags, _address = sock.recvmsg(BLOCK_SIZE, _ANCILLARY_SPACE)
    now, wall_ns = time.perf_counter(), time.time_ns()
    return data, now, kernel_stamp(ancillary, now, wall_ns)


class StampedLines:
    """The lines of an HTTP response body, each with the time its last byte reached this host.

    `floor` is the earliest time a line can carry (when the request was sent); stamps never go
    back in time (a wall-clock step between two reads cannot reorder tokens).
    """

    def __init__(self, response: ParsedResponse, floor: float, sep: bytes = b"\n") -> None:
        self.response = response
        self.sep = sep
        self.last = floor
        self.kernel_reads = 0
        self.user_reads = 0
        self.stamped = response._sock is not None and enable(response._sock)

    def __iter__(self) -> Iterator[tuple[bytes, float]]:
        response, buffer, sep = self.response, self.response._body_buffer, self.sep
        at = self.last
        if buffer:  # lines parsed along with the headers arrived by now; stamps after them are not earlier
            self.last = at = max(self.last, time.perf_counter())
        start = 0
        while True:
            end = buffer.find(sep, start)
            if end >= 0:
                line = bytes(buffer[start : end + len(sep)])
                start = end + len(sep)
                yield line, at
                continue
            del buffer[:start]
            start = 0
            if response.message_complete:
                if buffer:
                    yield bytes(buffer), at  # a last line without its ending
                    buffer.clear()
                return
            at = self._read()

    def _read(self) -> float:
        """One read of whatever has arrived, fed to the response's parser; its arrival time."""
        response = self.response
        sock = response._sock
        if sock is None:
            raise ConnectionError("connection closed before the end of the response")
        try:
            data, now, kernel = receive(sock, self.stamped)
            at = self._settle(now, kernel)
            response.feed(data)  # b"" tells the parser the connection ended
            if not data and not response.message_complete:
                raise ConnectionError("connection closed before the end of the response")
        except BaseException:
            response.release()
            raise
        return at

    def _settle(self, now: float, kernel: float | None) -> float:
        if kernel is None:
            self.user_reads += 1
            at = now
        else:
            self.kernel_reads += 1
            at = kernel
        self.last = max(self.last, at)
        return self.last
