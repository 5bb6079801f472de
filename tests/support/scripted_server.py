"""A STAND-IN OpenAI-compatible server with scripted timing, for measuring load generators.

Not vLLM: it generates no text. It answers `/v1/completions` and `/v1/chat/completions` (SSE
streams like vLLM's, with `stream_options.include_usage`) after a fixed time to first token and
a fixed inter-token latency, and records, per request, when the request was fully received and
when each token event was written to the socket (`time.perf_counter`, a system-wide monotonic
clock on Linux). "Received" is the KERNEL's receive stamp of the request's last bytes
(SO_TIMESTAMPNS, converted to perf_counter time by canary.load.rxstamp), not the moment this
server's asyncio loop got round to reading them: on a busy machine that read delay would land in
every client's measured error. The time of the read (`read_at`) is recorded beside it; where the
kernel gives no stamp, the read time is used and the record says so (`kernel_stamped`).
Comparing a client's measurements with those records gives the client's own timing error. It
can also inject failures (HTTP 500, or a stream cut in the middle) on every N-th request, to
prove failures are counted as failures.

Endpoints: the two generation APIs, `GET /v1/models`, `GET /health`, `POST /tokenize` (a
stand-in tokenizer: one token per whitespace-separated word), and the control API
`GET /scripted/records`, `POST /scripted/reset`, `POST /scripted/config` (JSON fields of Script).

Run: `python tests/support/scripted_server.py --port 0 --ttft-ms 50 --itl-ms 10`; it prints
`LISTENING http://HOST:PORT` once ready. `ScriptedServer` starts and stops it from Python. Test
support, not part of the installed canary package: standard library plus canary.load.rxstamp
(itself standard library only; run as a file, the repository root is put on sys.path for it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import TracebackType
from typing import Any

if __name__ == "__main__":  # run as a file (-P): canary is importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from canary.load.rxstamp import enable, keep_stamping, receive

READY_PREFIX = "LISTENING "
HEAD_LIMIT = 1 << 20  # bytes of a request line + headers


@dataclass
class Script:
    """The timing and failures the server plays."""

    ttft_s: float = 0.05
    itl_s: float = 0.01
    fail_every: int = 0
    cut_every: int = 0
    model: str = "scripted"
    max_model_len: int = 4096
    record: bool = True
    read_delay_s: float = 0.0  # test hook: wait this long before reading each request (its bytes wait in the kernel)

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a partial update (unknown keys are an error)."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(f"unknown script fields {sorted(unknown)}; known: {sorted(known)}")
        for key, value in changes.items():
            setattr(self, key, type(getattr(self, key))(value))


@dataclass
class Record:
    """What the server did for one generation request (perf_counter times)."""

    seq: int
    request_id: str
    path: str
    received_at: float  # kernel receive stamp of the request's last bytes (read_at where there was none)
    read_at: float  # when this server read them (user space)
    kernel_stamped: bool
    prompt_tokens: int
    output_tokens: int
    outcome: str = "ok"
    token_at: list[float] = field(default_factory=list)

    @property
    def ttft_s(self) -> float | None:
        """Received -> first token event written."""
        return self.token_at[0] - self.received_at if self.token_at else None

    @property
    def read_delay_s(self) -> float:
        """Bytes in the kernel -> read by the server."""
        return self.read_at - self.received_at

    @property
    def itl_s(self) -> list[float]:
        """Gaps between token events as written."""
        return [b - a for a, b in zip(self.token_at, self.token_at[1:], strict=False)]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, with the derived timings."""
        return {**asdict(self), "ttft_s": self.ttft_s, "itl_s": self.itl_s, "read_delay_s": self.read_delay_s}


def count_words(text: str) -> int:
    """The stand-in tokenizer's token count."""
    return len(text.split())


def word_ids(text: str) -> list[int]:
    """The stand-in tokenizer: one id in 100..999 per word."""
    return [100 + zlib.crc32(w.encode()) % 900 for w in text.split()]


def prompt_length(body: dict[str, Any]) -> int:
    """Prompt tokens of a completions or chat body under the stand-in tokenizer."""
    if "messages" in body:
        return sum(count_words(str(m.get("content", ""))) for m in body["messages"] if isinstance(m, dict))
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        return len(prompt) if not prompt or isinstance(prompt[0], int) else count_words(" ".join(map(str, prompt)))
    return count_words(str(prompt))


class HttpError(Exception):
    """A malformed request."""


@dataclass(frozen=True)
class Request:
    """One request as read from its connection."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float
    read_at: float
    kernel_stamped: bool


class Connection:
    """One client connection on a non-blocking socket, read with recvmsg for the kernel's receive stamps.

    asyncio's streams cannot hand over ancillary data, so reads wait for readability with
    `loop.add_reader` and writes go straight to the socket (`loop.sock_sendall` when it is full).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's transports do
        self.stamped = enable(sock)
        self.buffer = bytearray()
        self.kernel_at: float | None = None  # the last read's kernel stamp
        self.read_at = 0.0  # the last read's user-space time

    async def request(self, read_delay_s: float = 0.0) -> Request | None:
        """The next request; None when the connection closes before one starts (or mid-head)."""
        if read_delay_s > 0:
            await asyncio.sleep(read_delay_s)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > HEAD_LIMIT:
                raise HttpError(f"request head longer than {HEAD_LIMIT} bytes")
            if not await self._read():
                return None
        method, path, headers = _parse_head(bytes(self.buffer[: end + 4]))
        length = int(headers.get("content-length", "0"))
        if length < 0:
            raise HttpError(f"negative content-length {length}")
        size = end + 4 + length
        while len(self.buffer) < size:
            if not await self._read():
                raise ConnectionError("connection closed in the middle of a request body")
        body = bytes(self.buffer[end + 4 : size])
        del self.buffer[:size]
        # the read that completed the request: its bytes' kernel stamp, else the read's own time
        kernel = self.kernel_at
        received_at = kernel if kernel is not None else self.read_at
        return Request(method, path, headers, body, received_at, self.read_at, kernel is not None)

    async def _read(self) -> bool:
        """Add whatever has arrived to the buffer (waiting for it); False at the end of the stream."""
        while True:
            try:
                data, now, kernel = receive(self.sock, self.stamped)
                break
            except (BlockingIOError, InterruptedError):
                await self._readable()
        self.kernel_at, self.read_at = kernel, now
        self.buffer += data
        return bool(data)

    async def _readable(self) -> None:
        ready: asyncio.Future[None] = self.loop.create_future()
        fd = self.sock.fileno()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        self.loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            self.loop.remove_reader(fd)

    async def send(self, data: bytes) -> None:
        """Write all of data: at once when the socket buffer has room (no await), else waiting for room."""
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent < len(data):
            await self.loop.sock_sendall(self.sock, data[sent:])

    def close(self) -> None:
        """Close the socket (a cut stream: what was sent stays sent, the rest never comes)."""
        self.sock.close()


class ScriptedApp:
    """The server's state and request handling (HTTP/1.1 keep-alive)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.records: list[Record] = []
        self.seq = 0

    async def handle_connection(self, conn: Connection) -> None:
        """Serve requests on one connection until it closes."""
        try:
            while True:
                request = await conn.request(self.script.read_delay_s)
                if request is None:
                    return
                keep = await self.dispatch(request, conn)
                if not keep or request.headers.get("connection", "").lower() == "close":
                    return
        except (HttpError, ValueError) as exc:
            with contextlib.suppress(ConnectionError):
                await _send_json(conn, 400, {"error": {"message": str(exc)}}, keep_alive=False)
        except ConnectionError:
            return
        finally:
            conn.close()

    async def dispatch(self, request: Request, writer: Connection) -> bool:
        """Answer one request; False closes the connection."""
        method, path, body = request.method, request.path.split("?", 1)[0], request.body
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return await self.generate(path, request, _json_body(body), writer)
        if method == "GET" and path == "/health":
            return await _send_json(writer, 200, {})
        if method == "GET" and path == "/v1/models":
            model = {"id": self.script.model, "object": "model", "max_model_len": self.script.max_model_len}
            return await _send_json(writer, 200, {"object": "list", "data": [model]})
        if method == "POST" and path == "/tokenize":
            data = _json_body(body)
            text = (
                " ".join(str(m.get("content", "")) for m in data.get("messages", []))
                if "messages" in data
                else str(data.get("prompt", ""))
            )
            ids = word_ids(text)
            payload = {"tokens": ids, "count": len(ids), "max_model_len": self.script.max_model_len}
            return await _send_json(writer, 200, payload)
        if method == "GET" and path == "/scripted/records":
            return await _send_json(writer, 200, {"records": [r.to_json() for r in self.records]})
        if method == "POST" and path == "/scripted/reset":
            self.records.clear()
            self.seq = 0
            return await _send_json(writer, 200, {})
        if method == "POST" and path == "/scripted/config":
            try:
                self.script.update(_json_body(body))
            except (ValueError, TypeError) as exc:
                return await _send_json(writer, 400, {"error": {"message": str(exc)}})
            return await _send_json(writer, 200, asdict(self.script))
        return await _send_json(writer, 404, {"error": {"message": f"no route {method} {path}"}})

    async def generate(self, path: str, request: Request, body: dict[str, Any], writer: Connection) -> bool:
        """A scripted completion: fail, stream (possibly cut), or answer in one piece."""
        script = self.script
        self.seq += 1
        seq = self.seq
        chat = path.endswith("chat/completions")
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        request_id = request.headers.get("x-request-id") or f"scripted-{seq}"
        received_at = request.received_at  # the token schedule runs from the kernel's arrival stamp
        record = Record(
            seq, request_id, path, received_at, request.read_at, request.kernel_stamped, prompt_length(body), max_tokens
        )
        if script.record:
            self.records.append(record)
        if script.fail_every and seq % script.fail_every == 0:
            record.outcome = "failed"  # at once: a client counting it as a sample would see a "fast" request
            return await _send_json(writer, 500, {"error": {"message": "scripted failure", "code": 500}})
        cut_after = max_tokens // 2 if script.cut_every and seq % script.cut_every == 0 else None
        if not body.get("stream"):
            await asyncio.sleep(script.ttft_s + script.itl_s * (max_tokens - 1))
            return await _send_json(writer, 200, _full_response(record, script.model, chat))
        await writer.send(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = _EventFactory(record, script.model, chat)
        for k in range(max_tokens):
            due = received_at + script.ttft_s + k * script.itl_s
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if cut_after is not None and k == cut_after:
                record.outcome = "cut"
                writer.close()
                return False
            chunk = (events.role() if chat and k == 0 else b"") + events.token(k, last=k == max_tokens - 1)
            # stamped just before the write: no client can see the token earlier than this
            record.token_at.append(time.perf_counter())
            await writer.send(chunk)  # no await unless the socket buffer is full
        await writer.send((events.usage() if usage else b"") + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True


class _EventFactory:
    """Pre-formatted SSE events for one request (cheap to emit)."""

    def __init__(self, record: Record, model: str, chat: bool) -> None:
        self.record, self.chat = record, chat
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.prefix = f'{{"id":"cmpl-{record.request_id}","object":"{kind}","created":0,"model":"{model}",'

    def role(self) -> bytes:
        choice = '{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}'
        return _chunk(f'data: {self.prefix}"choices":[{choice}]}}\n\n'.encode())

    def token(self, k: int, last: bool) -> bytes:
        finish = '"length"' if last else "null"
        text = f" t{k}"
        if self.chat:
            choice = f'{{"index":0,"delta":{{"content":"{text}"}},"logprobs":null,"finish_reason":{finish}}}'
        else:
            choice = f'{{"index":0,"text":"{text}","logprobs":null,"finish_reason":{finish},"stop_reason":null}}'
        return _chunk(f'data: {self.prefix}"choices":[{choice}],"usage":null}}\n\n'.encode())

    def usage(self) -> bytes:
        p, n = self.record.prompt_tokens, self.record.output_tokens
        usage = f'{{"prompt_tokens":{p},"total_tokens":{p + n},"completion_tokens":{n}}}'
        return _chunk(f'data: {self.prefix}"choices":[],"usage":{usage}}}\n\n'.encode())


def _full_response(record: Record, model: str, chat: bool) -> dict[str, Any]:
    text = "".join(f" t{k}" for k in range(record.output_tokens))
    choice: dict[str, Any] = (
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        if chat
        else {"index": 0, "text": text, "finish_reason": "length"}
    )
    usage = {
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.output_tokens,
        "total_tokens": record.prompt_tokens + record.output_tokens,
    }
    return {"id": f"cmpl-{record.request_id}", "model": model, "choices": [choice], "usage": usage}


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise HttpError(f"bad request line {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    return parts[0], parts[1], headers


def _json_body(body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    data = json.loads(body)
    if not isinstance(data, dict):
        raise HttpError("expected a JSON object")
    return data


async def _send_json(writer: Connection, status: int, payload: Any, keep_alive: bool = True) -> bool:
    data = json.dumps(payload).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}.get(status, "Status")
    connection = "keep-alive" if keep_alive else "close"
    await writer.send(
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n"
        f"connection: {connection}\r\n\r\n".encode()
        + data
    )
    return keep_alive


async def serve(host: str, port: int, script: Script, ready: Any = None) -> None:
    """Run the server until cancelled; print the ready line (or call ready(url))."""
    app = ScriptedApp(script)
    keep_stamping()  # the kernel stamps packets only while some socket asks: from the first byte on
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    loop = asyncio.get_running_loop()
    connections: set[asyncio.Task[None]] = set()
    with socket.create_server((host, port), family=family, backlog=4096) as listener:
        listener.setblocking(False)
        enable(listener)  # accepted sockets inherit it: the request's first bytes carry stamps
        url = f"http://{host}:{listener.getsockname()[1]}"
        if ready is not None:
            ready(url)
        else:
            print(f"{READY_PREFIX}{url}", flush=True)
        try:
            while True:
                try:
                    sock, _address = await loop.sock_accept(listener)
                except ConnectionError:
                    continue  # the client gave up before it was accepted
                except OSError as exc:  # out of file descriptors or memory: pause accepting, as asyncio's server does
                    print(f"scripted server: accept failed ({exc}); retrying in 1 s", file=sys.stderr, flush=True)
                    await asyncio.sleep(1.0)
                    continue
                task = asyncio.create_task(app.handle_connection(Connection(sock)))
                connections.add(task)
                task.add_done_callback(connections.discard)
        finally:
            for task in connections:
                task.cancel()


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: pick a free port")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--fail-every", type=int, default=0, help="every N-th request answers HTTP 500")
    parser.add_argument("--cut-every", type=int, default=0, help="every N-th stream is cut halfway")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--no-record", action="store_true", help="keep no per-request records (long benches)")
    args = parser.parse_args(argv)
    script = Script(
        ttft_s=args.ttft_ms / 1e3,
        itl_s=args.itl_ms / 1e3,
        fail_every=args.fail_every,
        cut_every=args.cut_every,
        model=args.model,
        record=not args.no_record,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, script))
    return 0


class ScriptedServer:
    """Start the stand-in server as a subprocess (context manager); talk to its control API."""

    def __init__(
        self,
        ttft_s: float = 0.05,
        itl_s: float = 0.01,
        *,
        fail_every: int = 0,
        cut_every: int = 0,
        model: str = "scripted",
        record: bool = True,
        python: str = sys.executable,
        startup_timeout_s: float = 30.0,
        log_path: Path | None = None,
    ) -> None:
        self.args = [
            python,
            "-P",  # run as a file: the script's folder does not shadow the standard library
            str(Path(__file__).resolve()),
            "--ttft-ms",
            str(ttft_s * 1e3),
            "--itl-ms",
            str(itl_s * 1e3),
            "--fail-every",
            str(fail_every),
            "--cut-every",
            str(cut_every),
            "--model",
            model,
        ] + ([] if record else ["--no-record"])
        self.model = model
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> ScriptedServer:
        stderr = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True
        )
        deadline = time.monotonic() + self.startup_timeout_s
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        buffer = ""
        while time.monotonic() < deadline:
            chunk = self.proc.stdout.readline()
            buffer += chunk or ""
            if READY_PREFIX in buffer:
                self.url = buffer.split(READY_PREFIX, 1)[1].strip().split()[0]
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"scripted server did not start within {self.startup_timeout_s}s: {buffer!r}")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the server process group."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def records(self) -> list[Record]:
        """Every generation request since the last reset."""
        raw = self._call("GET", "/scripted/records")["records"]
        return [
            Record(
                seq=r["seq"],
                request_id=r["request_id"],
                path=r["path"],
                received_at=r["received_at"],
                read_at=r["read_at"],
                kernel_stamped=r["kernel_stamped"],
                prompt_tokens=r["prompt_tokens"],
                output_tokens=r["output_tokens"],
                outcome=r["outcome"],
                token_at=r["token_at"],
            )
            for r in raw
        ]

    def reset(self) -> None:
        """Forget the records and restart the request count (failure injection counts from 1)."""
        self._call("POST", "/scripted/reset", {})

    def configure(self, **changes: Any) -> None:
        """Change the script of the running server."""
        self._call("POST", "/scripted/config", changes)


if __name__ == "__main__":
    sys.exit(main())
