"""The stand-in server's request arrival stamps (tests/support/scripted_server.py), on real sockets.

The server's records are the yardstick of the load bench: a request's `received_at` must be when
its bytes reached the host (the kernel's receive stamp), not when the server's loop got round to
reading them, or the server's own read delay lands in every client's measured TTFT error. These
tests hold the server's read back on purpose (Script.read_delay_s: the bytes wait in the kernel)
and compare its records with the sending client's own perf_counter (system-wide on Linux).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from canary.load import rxstamp
from tests.support.scripted_server import Connection, HttpError, Request, ScriptedServer

TIMEOUT_S = 10.0  # every socket wait of these tests ends by then
READ_DELAY_S = 0.4
TTFT_S = 0.6
# a kernel stamp becomes perf_counter time through two clock reads in a row: a preemption between
# them moves it by that long (rarely over a millisecond, even on a busy machine)
SLACK_S = 0.02


@pytest.fixture(scope="module", autouse=True)
def stamping() -> None:
    """Kernel stamping on before any socket of these tests is made (Linux switches it on lazily)."""
    assert rxstamp.keep_stamping()


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(ttft_s=TTFT_S, itl_s=0.01) as scripted:
        yield scripted


def _send_and_read(url: str, request_id: str) -> tuple[float, float, bytes]:
    """One streamed completion on a raw connection: (before send, after send, whole response)."""
    parts = urlsplit(url)
    body = json.dumps({"model": "scripted", "prompt": "a b c", "max_tokens": 4, "stream": True}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
        f"x-request-id: {request_id}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT_S) as sock:
        sent_from = time.perf_counter()
        sock.sendall(head + body)
        sent_by = time.perf_counter()
        response = b""
        while chunk := sock.recv(1 << 16):
            response += chunk
    return sent_from, sent_by, response


def test_received_at_is_the_kernel_arrival_and_the_schedule_runs_from_it(server: ScriptedServer) -> None:
    server.reset()
    server.configure(read_delay_s=READ_DELAY_S)
    try:
        sent_from, sent_by, response = _send_and_read(server.url, "kstamp-1")
    finally:
        server.configure(read_delay_s=0.0)
    assert response.startswith(b"HTTP/1.1 200 OK") and b"data: [DONE]" in response
    [record] = [r for r in server.records() if r.request_id == "kstamp-1"]
    assert record.kernel_stamped
    # stamped when the bytes arrived: within the client's send call (loopback), not at the read
    assert sent_from - SLACK_S <= record.received_at <= sent_by + SLACK_S, (sent_from, record.received_at, sent_by)
    # the server read them about READ_DELAY_S later (never later than the first token was written)
    assert READ_DELAY_S - 0.05 <= record.read_delay_s <= READ_DELAY_S + 1.0, record.read_delay_s
    assert record.read_at > sent_by
    # the token schedule counts from the arrival: first token TTFT after it, earlier than TTFT after the read
    assert record.token_at[0] - record.received_at >= TTFT_S
    assert record.token_at[0] < record.read_at + TTFT_S, record.token_at[0] - record.read_at
    assert record.to_json()["read_delay_s"] == pytest.approx(record.read_at - record.received_at)


def test_without_a_read_delay_the_stamp_is_barely_earlier_than_the_read(server: ScriptedServer) -> None:
    server.reset()
    sent_from, sent_by, _response = _send_and_read(server.url, "kstamp-2")
    [record] = server.records()
    assert record.kernel_stamped and sent_from - SLACK_S <= record.received_at <= sent_by + SLACK_S
    assert 0.0 <= record.read_delay_s < 0.5  # the loop was idle: only scheduling delay between them


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=TIMEOUT_S)
        served, _address = listener.accept()
    return served, client


async def _request(conn: Connection) -> Request | None:
    return await asyncio.wait_for(conn.request(), TIMEOUT_S)


def test_a_request_in_two_packets_is_stamped_with_its_last_bytes() -> None:
    async def scenario() -> tuple[Request | None, float, float]:
        served, client = _tcp_pair()
        with client:
            conn = Connection(served)
            client.sendall(b"POST /v1/completions HTTP/1.1\r\ncontent-length: 5\r\n\r\nab")
            await asyncio.sleep(0.3)
            body_sent_from = time.perf_counter()
            client.sendall(b"cde")
            body_sent_by = time.perf_counter()
            request = await _request(conn)
            conn.close()
        return request, body_sent_from, body_sent_by

    request, sent_from, sent_by = asyncio.run(scenario())
    assert request is not None and request.body == b"abcde" and request.method == "POST"
    assert request.kernel_stamped
    assert sent_from - SLACK_S <= request.received_at <= sent_by + SLACK_S
    assert request.read_at >= sent_by


def test_no_kernel_stamp_falls_back_to_the_read_time() -> None:
    async def scenario() -> Request | None:
        served, client = socket.socketpair()  # a Unix socket: the kernel stamps no TCP arrival here
        with client:
            conn = Connection(served)
            conn.stamped = False  # as on a platform without SO_TIMESTAMPNS
            client.sendall(b"GET /health HTTP/1.1\r\n\r\n")
            request = await _request(conn)
            conn.close()
        return request

    request = asyncio.run(scenario())
    assert request is not None and request.path == "/health"
    assert not request.kernel_stamped
    assert request.received_at == request.read_at


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"GET /health HTTP/1.1\r\ncontent-length: -3\r\n\r\n", "negative content-length -3"),
        (b"GET /a b HTTP/1.1\r\n\r\n", "bad request line"),
    ],
)
def test_bad_request_heads_are_named(raw: bytes, message: str) -> None:
    async def scenario() -> None:
        served, client = socket.socketpair()
        with client:
            conn = Connection(served)
            client.sendall(raw)
            try:
                with pytest.raises(HttpError, match=message):
                    await _request(conn)
            finally:
                conn.close()

    asyncio.run(scenario())


def test_a_connection_closed_before_a_request_ends_quietly() -> None:
    async def scenario() -> Request | None:
        served, client = socket.socketpair()
        conn = Connection(served)
        client.sendall(b"GET /hea")
        client.close()
        request = await _request(conn)
        conn.close()
        return request

    assert asyncio.run(scenario()) is None


def test_a_body_cut_short_is_a_connection_error() -> None:
    async def scenario() -> None:
        served, client = socket.socketpair()
        conn = Connection(served)
        client.sendall(b"POST /v1/completions HTTP/1.1\r\ncontent-length: 10\r\n\r\nabc")
        client.close()
        try:
            with pytest.raises(ConnectionError, match="middle of a request body"):
                await _request(conn)
        finally:
            conn.close()

    asyncio.run(scenario())
