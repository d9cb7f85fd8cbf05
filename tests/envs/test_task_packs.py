"""Every shipped task pack (`envs/<task>/task.toml`) is a valid pool config and documented."""

import tomllib
from pathlib import Path

import numpy as np
import pytest

import atgrpo

PACKS = sorted((Path(__file__).parents[2] / "envs").glob("*/task.toml"))


def test_every_task_has_a_pack() -> None:
    assert {p.parent.name for p in PACKS} >= set(atgrpo.TASKS)


@pytest.mark.parametrize("pack", PACKS, ids=[p.parent.name for p in PACKS])
def test_pack_config_builds_a_pool(pack: Path) -> None:
    spec = tomllib.loads(pack.read_text())
    pool = atgrpo.EnvPool(spec["task"], 4, **spec["env"])
    pool.reset(np.arange(4), np.arange(4))
    assert all(pool.solve(np.arange(4)).plans)
    assert (pack.parent / "README.md").is_file()
