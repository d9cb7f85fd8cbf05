"""The learner is SIGKILLed mid-step and started again on the same address: the actor, which keeps
running, rejoins with backoff, the new learner resumes from the newest complete checkpoint, and the
run ends with exactly the weights and optimizer state of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from systest_util import (
    REFERENCE_STEPS,
    Processes,
    Run,
    hub_address,
    module_cmd,
    set_args,
    tiny_sets,
    train_rows,
    wait_for,
)
from test_resume import assert_same_tensors, load

pytestmark = pytest.mark.integration


def test_killed_learner_restarts_and_the_actor_rejoins(
    tmp_path: Path, processes: Processes, reference_run: Run
) -> None:
    assert REFERENCE_STEPS == 4
    out = tmp_path / "run"
    out.mkdir()
    # Short transport timeouts so the actor notices the dead hub quickly (plumbing: a resume may change them).
    sets = set_args(
        tiny_sets(
            out, run__steps=4, run__checkpoint_every=2, transport__request_timeout_s=5, transport__reconnect_s=120
        )
    )
    address = hub_address(out)
    learner_cmd = module_cmd("atgrpo.cli.learner", *sets, "--address", address)
    first = processes.start(learner_cmd, tmp_path / "learner-1.log")
    actor_log = tmp_path / "actor.log"
    actor = processes.start(module_cmd("atgrpo.cli.actor", *sets, "--address", address, "--id", "steady"), actor_log)
    latest = out / "checkpoints" / "latest"
    wait_for(lambda: latest.is_symlink() and os.readlink(latest) == "step_000002", 150, "the step-2 checkpoint", first)
    first.send_signal(signal.SIGKILL)  # in step 3: its samples and update are lost with the process
    assert first.wait(timeout=10) == -signal.SIGKILL

    second_log = tmp_path / "learner-2.log"
    second = processes.start(learner_cmd, second_log)
    try:
        assert second.wait(timeout=200) == 0, second_log.read_text()[-4000:]
        assert actor.wait(timeout=30) == 0, actor_log.read_text()[-3000:]
    except subprocess.TimeoutExpired:
        pytest.fail(f"restarted run did not finish:\n{second_log.read_text()[-3000:]}\n{actor_log.read_text()[-3000:]}")
    assert "resumed from" in second_log.read_text() and "at step 2" in second_log.read_text()
    assert "rejoined the hub" in actor_log.read_text()
    assert sorted(train_rows(out / "metrics.jsonl"))[-2:] == [3, 4]

    mine, straight = load(out, 4), load(reference_run.out_dir, 4)
    assert_same_tensors(mine["model"], straight["model"], "model")
    assert_same_tensors(mine["optimizer"], straight["optimizer"], "optimizer")
    assert isinstance(mine["model"], dict) and all(isinstance(t, torch.Tensor) for t in mine["model"].values())
