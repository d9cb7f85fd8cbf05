"""Streaming and pipelining end to end (issue 12), on the tiny run of the other system tests.

- Streaming (the default, whose run is the shared reference run) and the batch path train the
  same update: the same samples, and weights equal to float rounding.
- Pipelining (`max_staleness = 1`) runs with both backends and both policy regimes; samples are
  at most one version old, none is refused, every step trains on all of its envs.
- A pipelined run stopped and resumed trains every step's envs exactly once: the units of the next
  step already in when the checkpoint was written are handed back, not rolled out again.
"""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest
import torch
from systest_util import (
    TINY_MODEL,
    Processes,
    Run,
    hub_address,
    module_cmd,
    run_direct,
    run_train,
    set_args,
    tiny_sets,
    train_rows,
    wait_for,
)

pytestmark = pytest.mark.integration

HARNESS = Path(__file__).with_name("learner_harness.py")
ENVS = 8
RTOL = 1e-4


def run_lr(out: Path, policy: str = "shared") -> float:
    """The learning rate a finished run trained `policy` with (its resolved config.toml)."""
    import tomllib

    return float(tomllib.loads((out / "config.toml").read_text())["policies"][policy]["lr"])


def weights(out: Path, step: int, policy: str = "shared") -> dict[str, torch.Tensor]:
    return torch.load(out / f"checkpoints/step_{step:06d}/{policy}/learner.pt", weights_only=True)["model"]


def test_streamed_steps_equal_batch_steps(tmp_path: Path, reference_run: Run) -> None:
    out = tmp_path / "batch"
    run = run_train(out, tiny_sets(out, run__steps=2, run__checkpoint_every=2, train__streaming="false"))
    assert run.returncode == 0, run.output[-4000:]
    got, want = train_rows(out / "metrics.jsonl"), reference_run.train_rows()
    for k in ("rollout/samples", "rollout/reward_mean", "learner/shared/tokens"):
        assert got[1][k] == want[1][k], k  # the same samples in step 1
    for step in (1, 2):
        for k in ("learner/shared/loss", "learner/shared/grad_norm", "learner/shared/clip_frac"):
            assert got[step][k] == pytest.approx(want[step][k], rel=1e-4, abs=1e-7), (step, k)
    mine, streamed = weights(out, 2), weights(reference_run.out_dir, 2)
    # After two Adam steps a different summation order moves a weight by float rounding, far less
    # than one step; a wrong update moves it by about one Adam step (lr). So 1% of the run's lr.
    atol = 1e-2 * run_lr(reference_run.out_dir)
    assert run_lr(out) == run_lr(reference_run.out_dir)
    for k in streamed:
        torch.testing.assert_close(mine[k], streamed[k], atol=atol, rtol=RTOL, msg=k)


def check_pipelined(rows: dict[int, dict], steps: int, policies: tuple[str, ...]) -> None:
    assert sorted(rows) == list(range(1, steps + 1))
    for step, row in rows.items():
        assert row["rollout/envs"] == ENVS  # every env of the step, once
        assert row["learner/samples"] == row["rollout/samples"] > 0
        assert row["rollout/staleness_max"] <= 1
        assert row.get("hub/rejected_total", 0.0) == 0.0 and row.get("learner/dropped_total", 0.0) == 0.0
        for p in policies:
            assert row[f"learner/{p}/version"] == step


@pytest.mark.parametrize("regime", ["shared", "per-role"])
def test_pipelined_runs_in_both_regimes(tmp_path: Path, processes: Processes, regime: str) -> None:
    out = tmp_path / regime
    extra: dict[str, object] = {"run__steps": 3, "train__max_staleness": 1, "rollout__envs_per_step": ENVS}
    policies: tuple[str, ...] = ("shared",)
    if regime == "per-role":
        policies = ("plan", "tool")
        extra["role_policy"] = '{tool="tool",plan="plan"}'
        extra.update({f"policies__{p}__tiny__{k}": v for p in policies for k, v in TINY_MODEL.items()})
    run_direct(out, tiny_sets(out, policies=policies, **extra), processes, actors=2)
    check_pipelined(train_rows(out / "metrics.jsonl"), 3, policies)


def test_pipelined_runs_with_deepspeed(tmp_path: Path, processes: Processes) -> None:
    out = tmp_path / "ds"
    sets = tiny_sets(
        out,
        run__steps=2,
        train__max_staleness=1,
        train__backend='"deepspeed"',
        train__zero_stage=2,
        rollout__envs_per_step=ENVS,
    )
    run_direct(out, sets, processes, ranks=2)
    check_pipelined(train_rows(out / "metrics.jsonl"), 2, ("shared",))


def test_pipelined_resume_trains_every_env_once(tmp_path: Path, processes: Processes) -> None:
    out = tmp_path / "resumed"
    out.mkdir()
    # The checkpoint written at the stop waits until a unit of the next step is in (learner_harness).
    sets = tiny_sets(
        out,
        run__steps=4,
        train__max_staleness=1,
        rollout__envs_per_step=ENVS,
        rollout__envs_per_unit=1,
        run__checkpoint_every=0,
    )
    address = hub_address(out)
    learner = processes.start(
        [sys.executable, str(HARNESS), "wait-untaken", *set_args(sets), "--address", address], out / "l1.log"
    )
    actors = [
        processes.start(
            module_cmd("atgrpo.cli.actor", *set_args(sets), "--address", address, "--id", f"a{i}"), out / f"a{i}.log"
        )
        for i in range(2)
    ]
    wait_for(
        lambda: (out / "metrics.jsonl").exists() and train_rows(out / "metrics.jsonl"),
        150,
        "the first step's metrics",
        learner,
    )
    learner.send_signal(signal.SIGINT)  # stop after the current step, with a checkpoint
    assert learner.wait(timeout=120) == 0, (out / "l1.log").read_text()[-4000:]
    assert all(a.wait(timeout=60) == 0 for a in actors)
    stopped = max(train_rows(out / "metrics.jsonl"))
    assert stopped < 4

    log = run_direct(out, sets, processes)
    restored = int(re.search(r"resume: (\d+) units of later steps were already in", log).group(1))
    assert restored > 0, "no unit of the next step was in at the checkpoint: the test did not test resume"
    rows = train_rows(out / "metrics.jsonl")
    check_pipelined(rows, 4, ("shared",))
    assert rows[stopped + 1]["hub/units_restored"] == restored
