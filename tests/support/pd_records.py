"""Engine timing records made to order (the timing.<pid>.jsonl lines of
canary/targets/engine_site/timing_probe.py), for the join and decomposition tests: a known split of
each request's time written the way the two engines would, each process on its own monotonic base."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canary.load.stats import Sample
from canary.targets.engine_site.timing_probe import REQUIRED_HOOKS

SPLIT: dict[str, float] = {
    "router_in": 0.004,
    "prefill_queue": 0.003,
    "prefill_compute": 0.040,
    "router_between": 0.006,
    "decode_wait": 0.010,
    "kv_transfer": 0.020,
    "handover": 0.015,
    "first_decode_step": 0.025,
    "router_out": 0.002,
}
"""Seconds per segment of one request, in time order (router split in its three parts)."""


def ttft_of(split: dict[str, float]) -> float:
    return sum(split.values())


@dataclass
class Engine:
    """One engine process: its monotonic base (wall - mono) and its lines."""

    pid: int
    mono_base: float
    """wall = mono + mono_base (each process its own)."""
    lines: list[dict[str, Any]] = field(default_factory=list)
    hooks: dict[str, str] = field(default_factory=lambda: dict.fromkeys(REQUIRED_HOOKS, "installed"))

    def mono(self, wall: float) -> float:
        return wall - self.mono_base

    def text_lines(self) -> list[str]:
        """The file's lines: the anchor, the hook statuses, then the records."""
        anchor_wall = 1_700_000_000.0
        out = [{"ev": "start", "pid": self.pid, "wall": anchor_wall, "mono": anchor_wall - self.mono_base}]
        out += [{"ev": "hook", "name": n, "status": s} for n, s in self.hooks.items()]
        return [json.dumps(line) for line in out + self.lines]

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"timing.{self.pid}.jsonl"
        path.write_text("".join(line + "\n" for line in self.text_lines()), encoding="utf-8")
        return path


def add_request(
    prefill: Engine,
    decode: Engine,
    rid: str,
    sent: float,
    split: dict[str, float] | None = None,
    *,
    recompute_tokens: int = 0,
    read: bool = True,
) -> Sample:
    """Write one request's records into both engines and return the client's sample of it."""
    s = dict(SPLIT if split is None else split)
    t = sent + s["router_in"]
    p_add = t
    p_sched = p_add + s["prefill_queue"]
    p_first = p_sched + s["prefill_compute"]
    d_add = p_first + s["router_between"]
    r_start = d_add + s["decode_wait"]
    r_done = r_start + s["kv_transfer"]
    d_sched = r_done + s["handover"]
    d_first = d_sched + s["first_decode_step"]
    seen = d_first + s["router_out"]
    p_id, d_id = f"cmpl-router-{rid}-0-p", f"cmpl-router-{rid}-0-d"
    prefill.lines.append(
        {"ev": "req", "id": p_id, "cid": rid, "add": prefill.mono(p_add), "sched": prefill.mono(p_sched),
         "sched_tokens": 64, "first": prefill.mono(p_first), "finish": prefill.mono(p_first), "prompt": 64,
         "remote_prefill": False, "remote_decode": True, "status": "finished", "out": 1}
    )  # fmt: skip
    decode.lines.append(
        {"ev": "req", "id": d_id, "cid": rid, "add": decode.mono(d_add), "wait": decode.mono(d_add + 0.001),
         "kv_ready": decode.mono(r_done + 0.001), "sched": decode.mono(d_sched),
         "sched_tokens": 1 + recompute_tokens, "first": decode.mono(d_first), "finish": decode.mono(d_first + 0.1),
         "prompt": 64, "remote_prefill": True, "remote_decode": False, "remote_id": p_id, "status": "finished",
         "out": 8}
    )  # fmt: skip
    if read:
        decode.lines.append(
            {"ev": "read", "id": d_id, "remote_id": p_id, "engine": "prefill-engine", "start": decode.mono(r_start),
             "posted": decode.mono(r_start + 0.0005), "done": decode.mono(r_done), "ok": True, "blocks": 2,
             "reads": 1, "bytes": 65536, "nixl_s": 0.0004}
        )  # fmt: skip
    ttft = seen - sent
    return Sample(
        index=int(rid.rsplit("-", 1)[-1]),
        warmup=False,
        sent_at=sent,
        ended_at=seen + 0.1,
        expected_prompt_tokens=64,
        expected_output_tokens=8,
        ttft_s=ttft,
        e2e_s=ttft + 0.1,
        request_id=rid,
        output_tokens=8,
    )
