"""Lifecycle of a P/D pair: restart the prefill server while decode keeps serving (issue 40 item 5).

On a selected P/D cell (checks.lifecycle: off by default, `cells` picks which), after the other checks:

1. `prompts` greedy prompts through the pair (the router) give the reference tokens;
2. the target restarts the prefill server (Deployment.restart: stop its process group, start the same
   command on the same ports and cores, wait until ready); while it is down, one request goes straight
   to decode, which must answer it alone;
3. once prefill is back: decode's process must be the one from before and never have exited (liveness),
   the same prompts through the pair must all be served with the same greedy tokens, and decode's NIXL
   counters must grow (the KV of those prompts came from the new prefill).

Verdicts: pass when every gate passes, fail otherwise (a prefill that does not come back, a decode that
died or refused, a pair that serves other tokens or recomputes instead of pulling KV). `skipped` on
aggregated cells and cells `cells` leaves out; `unsupported` where the target cannot restart one role (a
container, a cluster, an endpoint); `error` when the pair did not serve the prompts before the restart.
"""

from __future__ import annotations

import threading
import time

from canary.checks.base import CheckContext, register
from canary.checks.kv_transfer.check import read_counters
from canary.checks.lifecycle.estimate import estimate
from canary.checks.lifecycle.exported import EXPORTED
from canary.checks.lifecycle.settings import LifecycleCheckConfig
from canary.checks.lifecycle.steps import Observed, complete, judge, prompts, selected
from canary.checks.parity.client import ParityError
from canary.core import promtext
from canary.errors import CanaryError
from canary.judge.results import CheckResult
from canary.targets.base import Deployment
from canary.targets.readiness import probe

NAME = "lifecycle"
ROLE = "prefill"
POLL_S = 0.5


def _nixl_bytes(deployment: Deployment) -> float | None:
    decode = deployment.server("decode")
    if decode is None or decode.metrics_url is None:
        return None
    try:
        return read_counters(promtext.scrape(decode.metrics_url)).bytes_transferred
    except CanaryError:
        return None


def _through_outage(
    deployment: Deployment, settings: LifecycleCheckConfig, restarting: threading.Event, outage: dict[str, object]
) -> None:
    """While the restart runs (in the check's own thread): once prefill is seen down, one request straight to
    decode. Runs in a helper thread: the restarted server must be started by the thread that outlives it (the
    local target's servers die with the thread that started them, PR_SET_PDEATHSIG)."""
    prefill, decode = deployment.server(ROLE), deployment.server("decode")
    assert prefill is not None and decode is not None
    while restarting.is_set() and "seen" not in outage:
        if not probe(prefill.base_url, None, timeout_s=2.0).ready:
            outage["seen"] = True
            try:
                complete(decode.base_url, deployment.served_model, "1 + 1 =", 4, settings.request_timeout_s)
                outage["answer"] = None
            except ParityError as exc:
                outage["answer"] = str(exc)
            return
        time.sleep(POLL_S)


def _exit_status(deployment: Deployment, role: str) -> int | str | None:
    return deployment.exit_status(role) if deployment.exit_status is not None else None


@register(NAME, order=5, settings=LifecycleCheckConfig, metrics=EXPORTED, estimate=estimate)
def lifecycle_check(ctx: CheckContext) -> CheckResult:
    """Restart prefill under a serving decode and judge that the pair lives through it."""
    settings = ctx.config.checks.section(LifecycleCheckConfig)
    if not selected(ctx.cell, settings):
        why = "aggregated cell" if ctx.cell.topology != "pd-nixl" else "not one of checks.lifecycle.cells"
        return CheckResult(name=NAME, verdict="skipped", summary=f"not applicable: {why}")
    deployment = ctx.deployment
    if not deployment.can_restart:
        return CheckResult(
            name=NAME,
            verdict="unsupported",
            summary=f"the {ctx.config.target.kind} target cannot restart one role of a deployment",
        )
    prefill, decode = deployment.server(ROLE), deployment.server("decode")
    if prefill is None or decode is None:
        return CheckResult(name=NAME, verdict="error", summary="the deployment has no prefill or no decode server")
    texts = prompts(settings.prompts)
    model, timeout = deployment.served_model, settings.request_timeout_s
    try:
        before = [complete(deployment.base_url, model, t, settings.max_tokens, timeout) for t in texts]
    except ParityError as exc:
        return CheckResult(name=NAME, verdict="error", summary=f"the pair did not serve before the restart: {exc}")
    prefill_pid, decode_pid = prefill.pid, decode.pid
    outage: dict[str, object] = {}
    restarting = threading.Event()
    restarting.set()
    watcher = threading.Thread(target=_through_outage, args=(deployment, settings, restarting, outage), daemon=True)
    started = time.monotonic()
    watcher.start()
    try:
        error = deployment.restart(ROLE, settings.restart_timeout_s)
    except Exception as exc:  # the target's failure to restart is this check's finding, not a crash
        error = f"{type(exc).__name__}: {exc}"
    restart_s = time.monotonic() - started
    restarting.clear()
    watcher.join(settings.request_timeout_s)
    after: list[list[int] | None] = []
    errors: list[str] = []
    bytes_before = _nixl_bytes(deployment)
    for text in texts:
        try:
            after.append(complete(deployment.base_url, model, text, settings.max_tokens, timeout))
        except ParityError as exc:
            after.append(None)
            errors.append(str(exc))
    bytes_after = _nixl_bytes(deployment)
    decode_now = deployment.server("decode")
    seen = Observed(
        restart_error=error,
        restart_s=restart_s,
        prefill_pids=(prefill_pid, deployment.servers[ROLE].pid),
        decode_pids=(decode_pid, decode_now.pid if decode_now is not None else None),
        decode_exit=_exit_status(deployment, "decode"),
        outage_seen=bool(outage.get("seen")),
        outage_answer=answer if isinstance(answer := outage.get("answer"), str) else None,
        before=before,
        after=after,
        after_errors=errors,
        nixl_bytes_after=None if bytes_before is None or bytes_after is None else bytes_after - bytes_before,
    )
    return result(seen)


def result(seen: Observed) -> CheckResult:
    """The check's result from what it saw (pass: every gate passed)."""
    gates = judge(seen)
    failed = [g for g in gates if not g.passed]
    total = len(seen.before)
    identical = sum(1 for old, new in zip(seen.before, seen.after, strict=True) if new == old)
    summary = (
        "; ".join(g.detail for g in failed)
        if failed
        else f"prefill restarted in {seen.restart_s:.1f} s, decode lived through it and served alone, "
        f"parity after {identical}/{total}"
    )
    survived = next(g.passed for g in gates if g.name == "decode-survived")
    return CheckResult(
        name=NAME,
        verdict="fail" if failed else "pass",
        summary=summary,
        gates=gates,
        metrics={
            "prefill_restart_s": round(seen.restart_s, 3),
            "decode_survived": 1.0 if survived else 0.0,
            "parity_after_restart": round(identical / total, 4) if total else 0.0,
        },
        evidence={
            "prefill_pids": list(seen.prefill_pids),
            "decode_pids": list(seen.decode_pids),
            "decode_exit": seen.decode_exit,
            "outage_seen": seen.outage_seen,
            "outage_answer": seen.outage_answer,
            "restart_error": seen.restart_error,
            "nixl_bytes_after_restart": seen.nixl_bytes_after,
            "after_errors": seen.after_errors,
        },
    )
