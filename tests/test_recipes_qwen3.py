"""The Qwen3 recipes' clocks fit their lengths (docs/gpus.md, "Heartbeats" and "Rank 0's waits"):
the lease covers one generate call of `max_new_tokens` at a slow decode rate, the round clock is
longer than the stall clock, and thinking is off as in the paper's runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from atgrpo.config import load_config
from atgrpo.config.engines import engines_per_actor

ENVS = Path(__file__).resolve().parents[1] / "envs"
RECIPES = sorted(p for p in ENVS.rglob("*.toml") if "qwen3" in p.name)
SLOW_DECODE = 7.0
"""Tokens per second per sequence the lease must allow a generate call (a 1.7B model on one GPU
decodes 32 sequences several times faster)."""


def test_there_are_qwen3_recipes():
    assert len(RECIPES) >= 2


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_the_clocks_fit_the_recipe(recipe: Path):
    cfg = load_config(recipe)
    tp = cfg.transport
    assert tp.unit_timeout_s * SLOW_DECODE >= cfg.rollout.max_new_tokens
    assert tp.step_timeout_s > tp.unit_timeout_s and tp.round_timeout_s > tp.step_timeout_s
    assert all(p.thinking is False for p in cfg.policies.values())
    if cfg.rollout.vllm_sleep_when_idle:
        assert engines_per_actor(cfg) == 1
