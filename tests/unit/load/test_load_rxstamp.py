"""Kernel receive timestamps for streamed tokens (canary.load.rxstamp), on real sockets.

The stand-in server with scripted timing (tests/support/scripted_server.py) stamps each token
event just before it writes it; the client reads the response with geventhttpclient's real HTTP
parser over a real loopback TCP connection and a client that is deliberately late. A token's
stamp must be when its bytes arrived (within milliseconds of the server's own stamp), not when
the late client got round to reading them: that is what keeps the client's own delays out of TTFT
and ITL. Where the kernel gives no stamp (a Unix socket), the read's own time is used.
"""

from __future__ import annotations

import itertools
import json
import random
import select
import socket
import statistics
import struct
import threading
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
from geventhttpclient.response import HTTPParseError, HTTPSocketResponse

from canary.load import rxstamp
from canary.load.rxstamp import StampedLines, kernel_stamp
from canary.load.sse import StreamRecord
from tests.support.scripted_server import ScriptedServer

TIMEOUT_S = 10.0  # every socket wait of these tests ends by then


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    assert rxstamp.keep_stamping()  # as the load process does before its first request
    with ScriptedServer(ttft_s=0.05, itl_s=0.4) as scripted:
        yield scripted


def _open_stream(
    server: ScriptedServer, request_id: str, max_tokens: int
) -> tuple[socket.socket, HTTPSocketResponse, float]:
    """POST a streaming completion by hand; the response with its headers read, and the send time."""
    url = urlsplit(server.url)
    assert url.hostname and url.port
    body = json.dumps({"model": server.model, "prompt": "a b c", "max_tokens": max_tokens, "stream": True}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nx-request-id: {request_id}\r\n\r\n"
    ).encode()
    sock = socket.create_connection((url.hostname, url.port), timeout=TIMEOUT_S)
    sent = time.perf_counter()
    sock.sendall(head + body)
    return sock, HTTPSocketResponse(sock, method="POST"), sent


def _token_lines(lines: StampedLines, pause: Callable[[int], None]) -> list[tuple[float, float]]:
    """(stamp, time the client read it) of every token event; `pause(k)` after the k-th."""
    out: list[tuple[float, float]] = []
    for line, at in lines:
        if line.startswith(b"data: {"):
            out.append((at, time.perf_counter()))
            pause(len(out) - 1)
    return out


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def _truth(server: ScriptedServer, request_id: str) -> list[float]:
    [record] = [r for r in server.records() if r.request_id == request_id]
    return record.token_at


def _late(sock: socket.socket, lateness_s: float, within_s: float) -> float:
    """A client late by design: wait until bytes wait in the socket (at most `within_s`), then stay
    busy `lateness_s` more without reading them. Returns when it saw them waiting."""
    select.select([sock], [], [], within_s)
    seen = time.perf_counter()
    time.sleep(lateness_s)
    return seen


CLOCK_SLACK_S = 0.001
"""A kernel stamp is CLOCK_REALTIME, converted to perf_counter time through time.time_ns(): on this
VM (2026-12-01) one stamp in ~10 came out 0.47 ms before the bytes were written (a loopback socket
pair, a send stamped with perf_counter just before it), while the rest were 13-32 us after: the
realtime clock the kernel stamps with and the vDSO's disagreed by that much at times."""


def test_a_late_client_stamps_arrival_not_its_read(server: ScriptedServer) -> None:
    server.configure(ttft_s=0.05, itl_s=0.4)
    sock, response, _ = _open_stream(server, "late", max_tokens=3)
    with sock:
        seen = _late(sock, 0.1, TIMEOUT_S)  # the first token waits 100 ms in the socket
        lines = StampedLines(response, floor=0.0)
        got = _token_lines(lines, lambda k: None)
    truth = _truth(server, "late")
    assert lines.stamped and lines.kernel_reads >= 3 and lines.user_reads == 0
    assert len(got) == len(truth) == 3
    (stamp, read), *rest = got
    assert read >= seen + 0.1 and stamp <= seen, "the stamp is the late read's time, not the arrival"
    assert -CLOCK_SLACK_S <= stamp - truth[0] <= 0.05, (stamp, truth[0])
    for (stamp, read), written in zip(rest, truth[1:], strict=True):
        assert written - CLOCK_SLACK_S <= stamp <= read, (written, stamp, read)
        assert stamp - written <= 0.05


def test_inter_token_gaps_do_not_carry_the_clients_own_delays(server: ScriptedServer) -> None:
    """A client that reads every token 2-9 ms after it came (ITL 20 ms): gaps as the server wrote them."""
    server.configure(ttft_s=0.02, itl_s=0.02)
    tokens = 40
    sock, response, sent = _open_stream(server, "jitter", max_tokens=tokens)
    rng = random.Random(7)

    def late_for_the_next(k: int) -> None:
        if k < tokens - 1:
            _late(sock, rng.uniform(0.002, 0.009), within_s=0.2)

    with sock:
        late_for_the_next(-1)
        lines = StampedLines(response, floor=sent)
        got = _token_lines(lines, late_for_the_next)
    truth = _truth(server, "jitter")
    assert len(got) == len(truth) == tokens
    stamped = [s for s, _ in got]
    read = [r for _, r in got]
    assert stamped == sorted(stamped)
    assert all(w - CLOCK_SLACK_S <= s <= r for s, r, w in zip(stamped, read, truth, strict=True))
    true_gaps = _gaps(truth)
    errors = [abs(c - g) for c, g in zip(_gaps(stamped), true_gaps, strict=True)]
    read_errors = [abs(c - g) for c, g in zip(_gaps(read), true_gaps, strict=True)]
    # reading late by U(2, 9) ms puts ~2.3 ms on a gap (median); the arrival stamps keep it under 0.5 ms
    assert statistics.median(read_errors) >= 0.001, "the client was not late: the test proves nothing"
    assert statistics.median(errors) <= 0.0005, statistics.median(errors)


def test_lines_and_the_records_view_of_them(server: ScriptedServer) -> None:
    server.configure(ttft_s=0.0, itl_s=0.002)
    sock, response, sent = _open_stream(server, "lines", max_tokens=5)
    record = StreamRecord(sent_at=sent)
    with sock:
        lines = StampedLines(response, floor=sent)
        for line, at in lines:
            assert line.endswith(b"\n")
            record.feed(line, at)
    assert record.done and record.token_events == 5 and len(record.gaps) == 4
    assert record.first_token_at is not None and record.first_token_at >= sent
    assert response.message_complete and response._sock is None  # released to its owner


def _serve_on(peer: socket.socket, parts: list[tuple[float, bytes]], close: bool) -> threading.Thread:
    """Write each part after its delay on a plain socket (a thread), then close if asked."""

    def play() -> None:
        for delay, data in parts:
            time.sleep(delay)
            peer.sendall(data)
        if close:
            peer.close()

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def test_no_kernel_stamp_falls_back_to_the_reads_own_time() -> None:
    """A Unix socket takes SO_TIMESTAMPNS but stamps nothing: each line carries its read's time."""
    client, peer = socket.socketpair()
    client.settimeout(TIMEOUT_S)
    with client, peer:
        thread = _serve_on(
            peer,
            [
                (0.0, HEAD),
                (0.05, _chunk(b"data: one\n\n") + _chunk(b"data: two\n\n")),
                (0.05, _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"),
            ],
            close=False,
        )
        response = HTTPSocketResponse(client, method="POST")
        before = time.perf_counter()
        lines = StampedLines(response, floor=0.0)
        got = [(line, at, time.perf_counter()) for line, at in lines]
        thread.join(TIMEOUT_S)
    assert [line for line, _, _ in got] == [b"data: one\n", b"\n", b"data: two\n", b"\n", b"data: [DONE]\n", b"\n"]
    assert lines.kernel_reads == 0 and lines.user_reads == 2
    stamps = [at for _, at, _ in got]
    assert stamps[0] == stamps[3] and stamps[4] == stamps[5]  # one read, one stamp
    # each read's own time: after the lines before it were taken, before its own lines were
    assert before <= stamps[0] <= got[0][2] <= got[3][2] < stamps[4] <= got[4][2]


def test_a_stream_cut_short_is_an_error_and_the_response_is_released() -> None:
    client, peer = socket.socketpair()
    client.settimeout(TIMEOUT_S)
    with client:
        thread = _serve_on(peer, [(0.0, HEAD), (0.01, _chunk(b"data: one\n\n"))], close=True)
        response = HTTPSocketResponse(client, method="POST")
        seen: list[bytes] = []
        with pytest.raises((ConnectionError, HTTPParseError), match=r"closed|Incomplete"):
            for line, _ in StampedLines(response, floor=0.0):
                seen.append(line)
        thread.join(TIMEOUT_S)
    assert seen == [b"data: one\n", b"\n"]
    assert response._sock is None


def test_stamps_never_go_back_or_before_the_floor() -> None:
    client, peer = socket.socketpair()
    client.settimeout(TIMEOUT_S)
    with client, peer:
        thread = _serve_on(peer, [(0.0, HEAD), (0.0, _chunk(b"data: x\n\n") + b"0\r\n\r\n")], close=False)
        response = HTTPSocketResponse(client, method="POST")
        floor = time.perf_counter() + 60.0  # e.g. a send time read after a wall-clock step
        stamps = [at for _, at in StampedLines(response, floor=floor)]
        thread.join(TIMEOUT_S)
    assert stamps == [floor, floor]


def test_kernel_stamp_conversion() -> None:
    assert rxstamp.SO_TIMESTAMPNS == 35  # Linux, 64-bit: where the canary's load client runs
    level, kind = socket.SOL_SOCKET, rxstamp.SO_TIMESTAMPNS
    wall_ns = 1_800_000_000_123_456_789
    arrived = struct.pack("@ll", 1_800_000_000, 120_456_789)  # 3 ms before wall_ns
    assert kernel_stamp([(level, kind, arrived)], 100.0, wall_ns) == pytest.approx(99.997, abs=1e-9)
    assert kernel_stamp([], 100.0, wall_ns) is None
    assert kernel_stamp([(level, kind, struct.pack("@ll", 0, 0))], 100.0, wall_ns) is None
    future = struct.pack("@ll", 1_800_000_001, 0)  # the wall clock stepped back since the packet came
    assert kernel_stamp([(level, kind, future)], 100.0, wall_ns) is None
    assert kernel_stamp([(level, kind + 1, arrived)], 100.0, wall_ns) is None  # another message type
