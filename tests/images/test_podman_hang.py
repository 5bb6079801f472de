"""The real podman, asked for its stacks when it misses a deadline (canary/targets/cli_deadline.py).

`podman events` follows the event log and never exits on its own: the hang here is podman's own."""

from __future__ import annotations

import time

import pytest

from canary.targets.cli_deadline import STACK_GRACE_S, CliHung
from tests.support import kube_play as kp


def test_a_podman_command_past_its_deadline_says_where_podman_was() -> None:
    podman = kp.Podman.find()
    started = time.monotonic()
    with pytest.raises(CliHung) as raised:
        podman.run("events", "--format", "{{.Name}}", timeout_s=3)
    assert time.monotonic() - started < 3 + STACK_GRACE_S
    head = raised.value.stacks_head()
    assert head.startswith("goroutine 1 ["), head[:300]
    assert "podman/system.eventsCmd" in head, head  # the command's own frame, from podman's SIGQUIT dump
    assert "fp=" not in head


def test_a_played_configmap_volume_is_removed_and_gone() -> None:
    podman = kp.Podman.find()
    name = f"canary-hang-test-{time.monotonic_ns()}"
    podman.must("volume", "create", name, timeout_s=60)
    kp.remove_volume(podman, name)
    assert podman.run("volume", "exists", name, timeout_s=60).returncode == 1
