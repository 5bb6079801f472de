"""Mooncake-format request traces: parse and check one (the trace workload, canary/load/workloads/trace/).

One JSON object a line: `timestamp` (ms), `input_length`, `output_length` (tokens) and optional
`hash_ids` (ids of prompt blocks; equal ids, equal blocks). Blank lines are skipped. The config loader
reads the file once (a bad line is a config error naming file:line) and the load client again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TraceRequest:
    """One line of a Mooncake-format trace."""

    line: int
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names file:line."""


def _field(record: dict[str, Any], key: str, where: str, minimum: float) -> float:
    value = record.get(key)
    if value is None:
        raise TraceError(f"{where}: no {key!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TraceError(f"{where}: {key!r} must be a number, got {value!r}")
    if value < minimum:
        raise TraceError(f"{where}: {key!r} must be at least {minimum:g}, got {value!r}")
    return float(value)


def load_trace(path: Path) -> list[TraceRequest]:
    """Parse a Mooncake-format JSONL trace (blank lines skipped); a bad line raises TraceError at file:line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from exc
    requests: list[TraceRequest] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise TraceError(f"{where}: a request must be a JSON object, got {type(record).__name__}")
        timestamp = _field(record, "timestamp", where, 0)
        input_length = _field(record, "input_length", where, 1)
        output_length = _field(record, "output_length", where, 1)
        if not (input_length.is_integer() and output_length.is_integer()):
            raise TraceError(f"{where}: input_length and output_length must be whole numbers")
        hash_ids = record.get("hash_ids", [])
        if not isinstance(hash_ids, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in hash_ids):
            raise TraceError(f"{where}: 'hash_ids' must be a list of integers, got {hash_ids!r}")
        if requests and timestamp < requests[-1].timestamp_ms:
            raise TraceError(f"{where}: timestamp {timestamp:g} is before the previous line's")
        requests.append(TraceRequest(number, timestamp, int(input_length), int(output_length), tuple(hash_ids)))
    if not requests:
        raise TraceError(f"{path}: the trace has no request")
    return requests
