"""Every shipped task pack (`envs/<task>/task.toml`) is a run config that builds a pool, with a README."""

from pathlib import Path

import numpy as np
import pytest

import atgrpo
from atgrpo.config import load_config

PACKS = sorted((Path(__file__).parents[2] / "envs").glob("*/task.toml"))


def test_every_task_has_a_pack() -> None:
    assert {p.parent.name for p in PACKS} >= set(atgrpo.TASKS)


@pytest.mark.parametrize("pack", PACKS, ids=[p.parent.name for p in PACKS])
def test_pack_config_builds_a_pool(pack: Path) -> None:
    cfg = load_config(pack)
    assert cfg.task.task == pack.parent.name
    pool = atgrpo.EnvPool(cfg.task.task, 4, **cfg.task.env_params(), max_steps=cfg.task.turns)
    pool.reset(np.arange(4), np.arange(4))
    assert all(pool.solve(np.arange(4)).plans)
    assert (pack.parent / "README.md").is_file()
