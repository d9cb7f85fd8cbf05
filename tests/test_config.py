"""Every shipped run config validates; the demo file is exactly the built-in defaults; bad keys fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from atgrpo.config import RunConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(ROOT.glob("envs/*/train*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_configs_validate(path: Path):
    cfg = load_config(path)
    assert cfg.role_policy and set(cfg.role_policy) == set(cfg.task.roles)


def test_demo_file_is_the_default():
    assert load_config(ROOT / "envs/planpath/train.toml") == RunConfig()


def test_shipped_configs_exist():
    assert len(SHIPPED) >= 2


def test_unknown_key_is_an_error():
    with pytest.raises(ValidationError):
        load_config(None, ["rollout.kk=3"])


def test_overrides_use_toml_values():
    cfg = load_config(None, ["rollout.k=8", 'task.roles=["plan"]', "train.backend=deepspeed"])
    assert cfg.rollout.k == 8 and cfg.task.roles == ["plan"] and cfg.train.backend == "deepspeed"


def test_bad_override_syntax():
    with pytest.raises(ValueError, match="section.key=value"):
        load_config(None, ["rollout.k"])


def test_multi_policy_mapping_is_checked():
    with pytest.raises(ValidationError, match="role_policy"):
        RunConfig.model_validate({"policies": {"a": {}, "b": {}}})
    with pytest.raises(ValidationError, match="serve no role"):
        RunConfig.model_validate({"policies": {"a": {}, "b": {}}, "role_policy": {"tool": "a", "plan": "a"}})
    cfg = RunConfig.model_validate({"policies": {"a": {}, "b": {}}, "role_policy": {"tool": "a", "plan": "b"}})
    assert cfg.roles_of("a") == ["tool"]
