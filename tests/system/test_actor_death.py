"""An actor SIGKILLed in the middle of a unit costs time, not data: its unit is reassigned whole, and
the run trains on exactly the samples (and so ends with exactly the weights) of a run nobody died in.

Real processes: `atgrpo.cli.learner` and two `atgrpo.cli.actor`s (through `actor_harness.py`, which
only adds the hooks that make the kill land mid-unit deterministically: the victim hangs right after
its first group of a training unit was staged on the hub, the survivor joins only then).
"""

from __future__ import annotations

import signal
import subprocess
import sys
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

pytestmark = pytest.mark.integration

HARNESS = Path(__file__).with_name("actor_harness.py")
UNIT_TIMEOUT_S = 3
STEPS = 2
SAME = (
    "rollout/samples",
    "learner/samples",
    "learner/groups",
    "rollout/reward_mean",
    "rollout/reward_team_mean",
    "rollout/reward_local_mean",
    "rollout/response_len_mean",
    "rollout/truncated_frac",
    "rollout/success",
    "rollout/episode_return",
    "rollout/turns",
    "advantage/abs_mean",
    "learner/shared/loss",
    "learner/shared/grad_norm",
    "learner/shared/tokens",
    "learner/shared/version",
)
"""Metrics that depend only on what was sampled and trained, never on who sampled it or when."""


def test_killed_actor_mid_unit_changes_nothing_but_time(
    tmp_path: Path, processes: Processes, reference_run: Run
) -> None:
    assert REFERENCE_STEPS >= STEPS
    out = tmp_path / "run"
    out.mkdir()
    sets = set_args(tiny_sets(out, run__steps=STEPS, transport__unit_timeout_s=UNIT_TIMEOUT_S))
    address = hub_address(out)  # actors may connect before the learner binds it
    marker = tmp_path / "victim-took-a-unit"
    learner_log = tmp_path / "learner.log"
    learner = processes.start(module_cmd("atgrpo.cli.learner", *sets, "--address", address), learner_log)
    victim = processes.start(
        [sys.executable, str(HARNESS), "freeze", str(marker), *sets, "--address", address, "--id", "victim"],
        tmp_path / "victim.log",
    )
    survivor = processes.start(
        [sys.executable, str(HARNESS), "after", str(marker), *sets, "--address", address, "--id", "survivor"],
        tmp_path / "survivor.log",
    )

    unit_id, step, env_offset = map(
        int,
        wait_for(
            lambda: marker.exists() and marker.read_text().strip(), 150, "the victim to stage samples of a unit", victim
        ).split(),
    )
    assert step == 0 and env_offset == 0  # the first unit of step 0: it was the only actor until now
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL

    try:
        rc = learner.wait(timeout=150)
    except subprocess.TimeoutExpired:
        pytest.fail(f"learner did not finish after the kill:\n{learner_log.read_text()[-4000:]}")
    log = learner_log.read_text()
    assert rc == 0, log[-4000:]
    assert survivor.wait(timeout=30) == 0, (tmp_path / "survivor.log").read_text()[-3000:]
    assert f"unit {unit_id} of step 0: actor victim silent" in log
    assert '{"type":"finished"' in log  # the learner's last event: its run summary

    got, want = train_rows(out / "metrics.jsonl"), reference_run.train_rows()
    assert sorted(got) == list(range(1, STEPS + 1))
    assert got[1]["hub/units_reassigned"] == 1.0
    assert got[STEPS]["hub/units_reassigned"] == 1.0
    assert got[STEPS].get("hub/orphan_batches", 0.0) == 0.0  # the victim never spoke again
    for s in got:
        assert got[s]["rollout/samples"] == want[s]["rollout/samples"] > 0
        mismatched = {k: (got[s].get(k), want[s].get(k)) for k in SAME if got[s].get(k) != want[s].get(k)}
        assert not mismatched, f"step {s} differs from the run without a kill: {mismatched}"

    # Same samples, same updates: the weights after the last step are bit-identical.
    mine = torch.load(out / f"checkpoints/step_{STEPS:06d}/shared/learner.pt", weights_only=True)["model"]
    ref = torch.load(reference_run.out_dir / f"checkpoints/step_{STEPS:06d}/shared/learner.pt", weights_only=True)[
        "model"
    ]
    assert mine.keys() == ref.keys()
    assert all(torch.equal(mine[k], ref[k]) for k in ref)


def test_killed_actor_mid_weight_transfer_changes_nothing_but_time(
    tmp_path: Path, processes: Processes, reference_run: Run
) -> None:
    """The victim dies with the weights of version 1 on the wire: its unit is reassigned, the hub
    never notices more than a silent peer, and the run trains on the samples of a run without it."""
    out = tmp_path / "run"
    out.mkdir()
    sets = set_args(tiny_sets(out, run__steps=STEPS, transport__unit_timeout_s=UNIT_TIMEOUT_S))
    address = hub_address(out)
    marker = tmp_path / "victim-is-receiving-weights"
    learner_log = tmp_path / "learner.log"
    learner = processes.start(module_cmd("atgrpo.cli.learner", *sets, "--address", address), learner_log)
    victim = processes.start(
        [sys.executable, str(HARNESS), "freeze-weights", str(marker), *sets, "--address", address, "--id", "victim"],
        tmp_path / "victim.log",
    )
    version = int(
        wait_for(
            lambda: marker.exists() and marker.read_text().strip(),
            150,
            "the victim to be receiving new weights",
            victim,
        )
    )
    assert version == 1
    survivor = processes.start(
        module_cmd("atgrpo.cli.actor", *sets, "--address", address, "--id", "survivor"), tmp_path / "survivor.log"
    )
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL
    try:
        rc = learner.wait(timeout=150)
    except subprocess.TimeoutExpired:
        pytest.fail(f"learner did not finish after the kill:\n{learner_log.read_text()[-4000:]}")
    assert rc == 0, learner_log.read_text()[-4000:]
    assert survivor.wait(timeout=30) == 0, (tmp_path / "survivor.log").read_text()[-3000:]
    assert "actor victim silent" in learner_log.read_text()

    got, want = train_rows(out / "metrics.jsonl"), reference_run.train_rows()
    assert sorted(got) == list(range(1, STEPS + 1))
    for s in got:
        mismatched = {k: (got[s].get(k), want[s].get(k)) for k in SAME if got[s].get(k) != want[s].get(k)}
        assert not mismatched, f"step {s} differs from the run without a kill: {mismatched}"
