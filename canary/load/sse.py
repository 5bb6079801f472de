"""Reading an OpenAI-style server-sent-event stream one line at a time, with a timestamp per line.

The user (locust side) reads the response body line by line (`rxstamp`) and hands every line
here with the time it arrived; this module knows nothing about sockets or locust, so it is
unit-tested directly. A token event is a `data:` chunk with a non-empty `choices` list (the
convention of `vllm bench serve`), except the chat role chunk (`delta.role`), which carries no
token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamRecord:
    """What one streaming response told us, with perf_counter timestamps."""

    sent_at: float
    first_token_at: float | None = None
    last_token_at: float | None = None
    gaps: list[float] = field(default_factory=list)
    token_events: int = 0
    usage: dict[str, Any] | None = None
    done: bool = False
    stream_error: str | None = None
    response_id: str | None = None
    finish_reason: str | None = None

    def feed(self, line: bytes, now: float) -> None:
        """Consume one line of the stream (with or without its line ending) received at `now`."""
        line = line.strip()
        if not line or line.startswith(b":"):
            return  # event separator or comment (keep-alive ping)
        if not line.startswith(b"data:"):
            return  # event:, id:, retry: fields carry nothing we use
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            data = json.loads(payload)
        except ValueError:
            self.stream_error = f"unparsable event: {payload[:80]!r}"
            return
        if not isinstance(data, dict):
            self.stream_error = f"unexpected event: {payload[:80]!r}"
            return
        self._event(data, now)

    def _event(self, data: dict[str, Any], now: float) -> None:
        if self.response_id is None and isinstance(data.get("id"), str):
            self.response_id = data["id"]
        choices = data.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            is_role_chunk = isinstance(delta, dict) and "role" in delta and not delta.get("content")
            if not is_role_chunk:
                if self.first_token_at is None:
                    self.first_token_at = now
                elif self.last_token_at is not None:
                    self.gaps.append(now - self.last_token_at)
                self.last_token_at = now
                self.token_events += 1
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        if "error" in data and not choices:
            error = data["error"]
            message = error.get("message") if isinstance(error, dict) else error
            self.stream_error = str(message)[:200]

    @property
    def prompt_tokens(self) -> int | None:
        """Prompt tokens from the server's usage."""
        return _int_or_none(self.usage, "prompt_tokens")

    @property
    def output_tokens(self) -> int | None:
        """Completion tokens from the server's usage."""
        return _int_or_none(self.usage, "completion_tokens")


def _int_or_none(usage: dict[str, Any] | None, key: str) -> int | None:
    if usage is None:
        return None
    value = usage.get(key)
    return int(value) if isinstance(value, (int, float)) else None
