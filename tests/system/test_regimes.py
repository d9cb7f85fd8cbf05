"""Policy regimes: one shared policy for every role, or one policy per role (`role_policy`).

End to end through atgrpo-train for the per-role regime (the shared regime is the reference run);
in-process checks that each policy is trained, and warm-started, only on its own roles' data; and
config validation of the role -> policy mapping.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from systest_util import TINY_MODEL, Run, run_train, tiny_sets

from atgrpo.config import load_config
from atgrpo.messages import GroupKey, Sample

ROLES = ("tool", "plan")
TWO_POLICIES = [f"policies.{p}.tiny.{k}={v}" for p in ROLES for k, v in TINY_MODEL.items()] + [
    'role_policy={tool="tool",plan="plan"}'
]


def two_policy_toml(path: Path) -> Path:
    lines = ['role_policy = { tool = "tool", plan = "plan" }', ""]
    for p in ROLES:
        lines.append(f"[policies.{p}]")
        lines.append("lr = 5e-5")
        lines.append(f"[policies.{p}.tiny]")
        lines.extend(f"{k} = {v}" for k, v in TINY_MODEL.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return path


@pytest.mark.integration
def test_two_policies_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "two"
    config = two_policy_toml(tmp_path / "two_policies.toml")
    run = run_train(out, tiny_sets(out, policies=ROLES), config=config)
    assert run.returncode == 0, run.output[-4000:]
    rows = run.train_rows()
    assert sorted(rows) == [1, 2]
    for step, row in rows.items():
        assert row["learner/tool/version"] == step and row["learner/plan/version"] == step
        assert not any(k.startswith("learner/shared/") for k in row)
        # Every response token of the step is trained on by exactly one of the two policies.
        total = row["rollout/response_len_mean"] * row["rollout/samples"]
        assert row["learner/tool/tokens"] > 0 and row["learner/plan/tokens"] > 0
        assert row["learner/tool/tokens"] + row["learner/plan/tokens"] == pytest.approx(total)
    assert rows[2]["learner/tool/version"] == rows[2]["learner/plan/version"] == 2.0
    for p in ROLES:
        assert (out / "models" / p / "config.json").is_file()
        assert (out / "checkpoints/step_000002" / p / "learner.pt").is_file()
    assert (out / "eval.json").is_file()


def test_single_policy_trains_every_role(reference_run: Run) -> None:
    rows = reference_run.train_rows()
    for step, row in rows.items():
        assert row["learner/shared/version"] == step
        assert {"rollout/tool/reward_mean", "rollout/plan/reward_mean"} <= row.keys()
        assert row["learner/shared/tokens"] == pytest.approx(row["rollout/response_len_mean"] * row["rollout/samples"])
        assert not any(k.startswith(("learner/tool/", "learner/plan/")) for k in row)


# -- in process ------------------------------------------------------------------------------------


def two_policy_config(out: Path, *extra: str):
    return load_config(None, [*tiny_sets(out, policies=ROLES), *TWO_POLICIES, *extra])


def first_prompt_tokens(mb) -> list[int]:
    """Each row's first prompt token, in either micro-batch layout (prompts here have no padding)."""
    return (mb.input_ids[:, 0] if mb.prefix is None else mb.prefix.ids[mb.prefix.row, 0]).tolist()


@pytest.mark.parametrize("share_prefix", [True, False])
def test_each_policy_trains_only_on_its_roles_samples(tmp_path: Path, share_prefix: bool) -> None:
    from atgrpo.learner.advantages import step_advantages
    from atgrpo.learner.packing import plan_step
    from atgrpo.learner.trainer import Trainer
    from atgrpo.models.tiny import build_tiny_model
    from atgrpo.paths import policy_dir

    cfg = two_policy_config(tmp_path, f"train.share_prefix={str(share_prefix).lower()}")
    for p in ROLES:
        build_tiny_model(cfg.policies[p].tiny, policy_dir(cfg, p))
    trainer = Trainer(cfg)
    seen: dict[str, list] = {p: [] for p in ROLES}
    for p, backend in trainer.backends.items():
        real = backend.train_step

        def record(mbs, total_tokens, proximal=None, *, p=p, real=real):
            seen[p].append(([first_prompt_tokens(mb) for mb in mbs], total_tokens))
            return real(mbs, total_tokens, proximal)

        backend.train_step = record
    first = {"tool": 11, "plan": 12}  # a prompt's first token says which role it was made for
    rng = np.random.default_rng(0)
    samples = [
        Sample(
            "planpath-atgrpo",
            role,
            0,
            0,
            role,
            GroupKey(env, agent, turn),
            [first[role], 20, 21],
            list(range(5, 5 + n)),
            [-1.0] * n,
            reward=float(rng.normal()),
            reward_team=0.0,
            reward_local=0.0,
            branch=b,
        )
        for env in range(3)
        for turn in range(2)
        for agent, role in enumerate(ROLES)
        for b in range(2)
        for n in [int(rng.integers(1, 6))]
    ]
    tr = cfg.train
    (plan,) = plan_step(
        samples,
        step_advantages(samples, cfg.rollout.grouping).values,
        policies=ROLES,
        pad_ids=trainer.pad_ids,
        world=1,
        minibatches=tr.minibatches,
        max_tokens=tr.micro_batch_tokens,
        aggregation=tr.loss_aggregation,
        share_prefix=tr.share_prefix,
    )
    trainer.train(plan)
    assert trainer.versions == {"tool": 1, "plan": 1}
    for p in ROLES:
        ((firsts, total_tokens),) = seen[p]
        rows = [t for mb in firsts for t in mb]
        assert rows and set(rows) == {first[p]}, f"{p} trained on another role's samples"
        assert len(rows) == sum(s.role == p for s in samples)
        assert total_tokens == sum(len(s.response_ids) for s in samples if s.role == p)


def test_each_policy_is_warm_started_on_its_own_roles_prompts(tmp_path: Path, monkeypatch) -> None:
    """The plan policy must see the tool section in its demos (as it will in every rollout), and
    neither policy learns the other role's answers."""
    import atgrpo.warmstart.demos as demos
    from atgrpo.models.folder import load_tokenizer
    from atgrpo.warmstart.prepare import prepare_models

    made: list[list[tuple[list[int], list[int]]]] = []
    real = demos.make_demos

    def record(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(demos, "make_demos", record)
    cfg = two_policy_config(tmp_path, "warmstart.steps=1", "warmstart.batch_size=8", "warmstart.tool_noise=0.0")
    prepare_models(cfg)
    assert len(made) == 2  # one warm-start step per policy, in sorted order: plan, tool
    tok = load_tokenizer(tmp_path / "models" / "plan")
    plan_prompts = [tok.decode(p) for p, _ in made[0]]
    tool_prompts = [tok.decode(p) for p, _ in made[1]]
    assert plan_prompts and tool_prompts
    assert all(t.endswith("P:") for t in plan_prompts), "plan policy warm-started on tool prompts"
    assert all(t.endswith("T:") for t in tool_prompts), "tool policy warm-started on plan prompts"
    # Every rollout prompt of the plan agent carries the tool agent's answer and its outcome.
    assert all("\nT" in t and "=" in t.split("\nT", 1)[1] for t in plan_prompts), plan_prompts[:2]


# -- config validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (['role_policy={tool="tool"}'], r"roles without a policy \['plan'\]"),
        (['role_policy={tool="tool",plan="tool"}'], r"policies \['plan'\] serve no role"),
        (['role_policy={tool="tool",plan="planner"}'], r"unknown policies \['planner'\]"),
        (["role_policy={}"], "with several policies, role_policy must map every role"),
        (['task.roles=["plan"]'], r"policies \['tool'\] serve no role"),
    ],
)
def test_bad_role_mappings_are_validation_errors(tmp_path: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        two_policy_config(tmp_path, *overrides)


def test_good_mappings_validate(tmp_path: Path) -> None:
    cfg = two_policy_config(tmp_path)
    assert cfg.role_policy == {"tool": "tool", "plan": "plan"}
    assert cfg.roles_of("tool") == ["tool"] and cfg.roles_of("plan") == ["plan"]
    single = load_config(None, tiny_sets(tmp_path))
    assert single.role_policy == {"tool": "shared", "plan": "shared"}
    assert single.roles_of("shared") == ["tool", "plan"]
