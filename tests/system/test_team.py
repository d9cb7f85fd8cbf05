"""Math teams end to end (python/atgrpo/ALGORITHM.md, "Teams"): a team of one tool agent, one reasoner and
a judge trained by `atgrpo-train` on the tiny model (hub, actor, intake, learner), the judge on a
policy of its own; and one training step of 3 reasoners + 1 tool agent + a judge with the real model
(SmolLM2-135M, torch engine, one env) in this process, as test_real_model does for the two-agent team."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from systest_util import TINY_MODEL, run_train, tiny_sets

from atgrpo.config import load_config

pytestmark = pytest.mark.integration

POLICIES = ("shared", "judge")
MISMATCH_MAX = 1e-3


def test_a_team_of_one_each_trains_end_to_end_on_the_tiny_model(tmp_path: Path) -> None:
    out = tmp_path / "team"
    sets = tiny_sets(
        out,
        policies=POLICIES,
        task__task='"math"',
        task__env="{}",
        task__turns=2,
        task__sandbox_timeout_s=1.0,
        task__roles='["tool", "reasoner", "judge"]',
        warmstart__steps=0,
        rollout__k=2,
        rollout__envs_per_step=2,
        run__eval_seeds=2,
    )
    sets += [f"policies.{p}.tiny.{k}={v}" for p in POLICIES for k, v in TINY_MODEL.items()]
    sets += ['role_policy={tool="shared", reasoner="shared", judge="judge"}']
    run = run_train(out, sets)
    assert run.returncode == 0, run.output[-4000:]
    rows = run.train_rows()
    assert sorted(rows) == [1, 2]
    for step, row in rows.items():
        assert row["hub/rejected_total"] == 0.0, row
        # Tree sampling: K samples per agent and turn played, per env.
        assert row["rollout/samples_per_env"] == 2 * 3 * row["rollout/turns"], row
        assert row["rollout/samples"] == 2 * row["rollout/samples_per_env"], row
        assert {"rollout/tool/reward_mean", "rollout/reasoner/reward_mean", "rollout/judge/reward_mean"} <= set(row)
        for p in POLICIES:  # both policies trained on their agents' samples and moved on
            assert row[f"learner/{p}/version"] == step and row[f"learner/{p}/tokens"] > 0, (p, row)


def test_one_step_of_a_five_agent_team_with_the_real_model(smollm2: Path) -> None:
    from atgrpo.engines.base import SamplingParams
    from atgrpo.engines.factory import open_engine
    from atgrpo.learner.advantages import step_advantages
    from atgrpo.learner.backends import TorchBackend
    from atgrpo.learner.batching import build_microbatches, loss_normalizer
    from atgrpo.learner.intake import IntakeLimits, PolicyLimits, sample_fault
    from atgrpo.learner.loss import LossConfig
    from atgrpo.messages import WorkUnit
    from atgrpo.models.folder import load_model
    from atgrpo.workflows.base import PolicyHandle
    from atgrpo.workflows.factory import make_workflow

    cfg = load_config(
        None,
        [
            'task.task="math"',
            'task.prompts="paper"',
            "task.turns=1",
            "task.team={reasoner=3, tool=1, judge=1}",
            "rollout.k=2",
            "rollout.max_new_tokens=32",
            "rollout.truncated_is_invalid=false",
            f"policies.shared.path={json.dumps(str(smollm2))}",
        ],
    )
    wf = make_workflow(cfg)
    engine, tok = open_engine(smollm2, cfg.rollout, policy="shared", version=0)
    try:
        unit = WorkUnit(0, 0, [0], 0, "train", {"shared": 0})
        params = SamplingParams(max_new_tokens=32, temperature=cfg.rollout.temperature)
        result = wf.run(unit, {"shared": PolicyHandle(engine, tok)}, params, run_id=cfg.run.name, seed=0)
    finally:
        wf.close()
    samples = result.samples
    names = ["tool", "reasoner_1", "reasoner_2", "reasoner_3", "judge"]
    assert len(samples) == 1 * 2 * 5  # envs x K x agents, one turn
    groups: dict = {}
    for s in samples:
        groups.setdefault(s.key, set()).add(s.role)
    assert sorted((k.agent, *roles) for k, roles in groups.items()) == list(enumerate(names))
    limits = IntakeLimits.from_config(cfg, {"shared": PolicyLimits(vocab_size=len(tok))})
    assert all(sample_fault(s, limits) is None for s in samples)
    adv = step_advantages(samples, cfg.rollout.grouping)
    assert adv.num_groups == 5
    backend = TorchBackend(
        load_model(smollm2),
        lr=1e-4,
        weight_decay=0.0,
        grad_clip=1.0,
        loss_cfg=LossConfig(temperature=cfg.rollout.temperature, entropy_coef=0.01),
    )
    mbs = build_microbatches(samples, adv.values, max_tokens=16384, pad_id=2, share_prefix=True)
    metrics = backend.train_step(mbs, loss_normalizer(samples, "token_mean"))
    assert metrics["logprob_mismatch"] <= MISMATCH_MAX and metrics["grad_norm"] > 0
