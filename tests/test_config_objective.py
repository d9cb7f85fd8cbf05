"""The objective settings of issue 49 in the config: what they resolve to, what the loss gets, and
the combinations refused when the config is read, each with its reason."""

from __future__ import annotations

import pytest

from atgrpo.config import dump_config, load_config
from atgrpo.learner.loss import LossConfig
from atgrpo.learner.trainer import loss_config


def test_defaults_are_todays_objective() -> None:
    cfg = load_config(None, [])
    assert cfg.train.clip_range == (0.2, 0.2)
    assert loss_config(cfg) == LossConfig(clip_eps_low=0.2, clip_eps_high=0.2, temperature=0.7)
    ro = cfg.rollout
    assert ro.scale_advantages_by_std and not ro.drop_constant_groups and ro.overlong_buffer == 0
    assert ro.truncated_is_invalid and ro.refill_groups == 0
    assert cfg.train.loss_aggregation == "token_mean" and cfg.train.ratio_level == "token"


def test_clip_eps_is_the_symmetric_shorthand() -> None:
    assert load_config(None, ["train.clip_eps=0.3"]).train.clip_range == (0.3, 0.3)
    cfg = load_config(None, ["train.clip_eps_high=0.28"])
    assert cfg.train.clip_range == (0.2, 0.28)
    assert (loss_config(cfg).clip_eps_low, loss_config(cfg).clip_eps_high) == (0.2, 0.28)


def test_clip_high_below_low_is_refused() -> None:
    with pytest.raises(ValueError, match=r"clip_eps_high \(0.1\) is below train.clip_eps_low \(0.2\)"):
        load_config(None, ["train.clip_eps_high=0.1"])
    with pytest.raises(ValueError, match="is below train.clip_eps_low"):
        load_config(None, ["train.clip_eps_low=0.3", "train.clip_eps=0.25"])


def test_an_overlong_buffer_longer_than_a_budget_is_refused() -> None:
    with pytest.raises(ValueError, match=r"overlong_buffer = 40 is longer than the response budget of \{'tool': 32"):
        load_config(None, ["rollout.overlong_buffer=40"])
    # a role's own, smaller budget counts too (config.budgets)
    with pytest.raises(ValueError, match=r"response budget of \{'plan': 8\}"):
        load_config(None, ["rollout.overlong_buffer=16", "rollout.max_new_tokens_per_role={plan=8}"])
    assert load_config(None, ["rollout.overlong_buffer=32"]).rollout.overlong_buffer == 32


def test_the_overlong_buffer_replaces_the_hard_truncation_penalty() -> None:
    cfg = load_config(None, ["rollout.overlong_buffer=8"])
    assert cfg.rollout.truncated_is_invalid is False
    assert load_config(
        None, ["rollout.overlong_buffer=8", "rollout.truncated_is_invalid=false"]
    ).rollout.overlong_buffer
    with pytest.raises(ValueError, match="replaces the hard truncation penalty"):
        load_config(None, ["rollout.overlong_buffer=8", "rollout.truncated_is_invalid=true"])


def test_refill_needs_a_cap_and_dropped_groups() -> None:
    with pytest.raises(ValueError, match="needs rollout.refill_max_envs: without a cap"):
        load_config(None, ["rollout.drop_constant_groups=true", "rollout.refill_groups=20"])
    with pytest.raises(ValueError, match="refill_groups needs rollout.drop_constant_groups"):
        load_config(None, ["rollout.refill_groups=20", "rollout.refill_max_envs=16"])
    cfg = load_config(
        None, ["rollout.drop_constant_groups=true", "rollout.refill_groups=20", "rollout.refill_max_envs=16"]
    )
    assert (cfg.rollout.refill_groups, cfg.rollout.refill_max_envs) == (20, 16)


def test_unknown_values_are_refused() -> None:
    with pytest.raises(ValueError, match="ratio_level"):
        load_config(None, ['train.ratio_level="episode"'])
    with pytest.raises(ValueError, match="loss_aggregation"):
        load_config(None, ['train.loss_aggregation="token_sum"'])


def test_recipes_read_back_from_their_resolved_config(tmp_path) -> None:
    recipes = [
        ["train.clip_eps_high=0.28", "rollout.drop_constant_groups=true", "rollout.overlong_buffer=8"],
        ['train.loss_aggregation="seq_mean_token_sum"', "rollout.scale_advantages_by_std=false"],
        ['train.ratio_level="sequence"', "train.clip_eps_low=3e-4", "train.clip_eps_high=4e-4"],
    ]
    for overrides in recipes:
        cfg = load_config(None, overrides)
        path = tmp_path / "run.toml"
        path.write_text(dump_config(cfg))
        assert load_config(path) == cfg
