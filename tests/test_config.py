"""The run config: shipped files validate and round-trip through TOML; the demo file is the built-in
defaults; bad keys fail; each task's env parameters are typed, match the Rust pool, and are documented."""

from __future__ import annotations

import ast
import inspect
import math
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

import atgrpo
from atgrpo.config import (
    PREDATED_POLICY_KEYS,
    RESOLVED_HEADER,
    TASK_ENV,
    TASK_ROLES,
    PolicySection,
    RunConfig,
    dump_config,
    load_config,
)
from atgrpo.config.toml_io import to_toml
from atgrpo.errors import InvalidConfigError

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(ROOT.glob("envs/*/train*.toml")) + sorted(ROOT.glob("envs/*/task.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_configs_validate_and_round_trip(path: Path, tmp_path: Path):
    cfg = load_config(path)
    assert cfg.role_policy and set(cfg.role_policy) == set(cfg.task.roles)
    out = tmp_path / "config.toml"
    out.write_text(cfg.to_toml())
    assert load_config(out) == cfg


@pytest.mark.parametrize("task", TASK_ROLES)
def test_defaults_of_every_task_round_trip(task: str, tmp_path: Path):
    cfg = load_config(None, [f"task.task={task}"])
    (tmp_path / "c.toml").write_text(dump_config(cfg))
    assert load_config(tmp_path / "c.toml") == cfg


def test_demo_file_is_the_default():
    assert load_config(ROOT / "envs/planpath/train.toml") == RunConfig()


def test_a_resolved_config_older_than_a_key_reads_back_as_it_ran(tmp_path: Path):
    """config.toml written before `lr_schedule` existed: those runs ran a constant lr, whatever
    today's default is; a user's own file (no resolved header) takes today's default."""
    cfg = load_config(None, ["role_policy={plan='a', tool='b'}", "policies.a.lr=1e-4", "policies.b.lr=2e-4"])
    old = "\n".join(line for line in cfg.to_toml().splitlines() if not line.startswith("lr_schedule"))
    assert "lr_schedule" not in old and old.startswith(f"# {RESOLVED_HEADER}")
    (tmp_path / "old.toml").write_text(old)
    back = load_config(tmp_path / "old.toml")
    assert {p.lr_schedule for p in back.policies.values()} == {PREDATED_POLICY_KEYS["lr_schedule"]} == {"constant"}
    assert load_config(tmp_path / "old.toml", ["policies.a.lr_schedule=cosine"]).policies["a"].lr_schedule == "cosine"
    (tmp_path / "mine.toml").write_text(old.split("\n", 1)[1])  # the same keys, not written by atgrpo
    assert {p.lr_schedule for p in load_config(tmp_path / "mine.toml").policies.values()} == {
        PolicySection().lr_schedule
    }


def test_shipped_configs_exist():
    assert len(SHIPPED) >= 5


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
    assert load_config(None, ["policies={a={}, b={}}", 'role_policy={tool="a", plan="b"}']) == cfg


# ---- per-task env parameters ----


def test_env_defaults_follow_the_task():
    demo = {
        "width": 6,
        "height": 6,
        "obstacle_ratio": 0.25,
        "min_distance": 3,
        "invalid_move_penalty": 0.0,
        "stop_at_goal": False,
    }
    assert demo.items() <= RunConfig().task.env_params().items()
    for task in ("sokoban", "sudoku"):  # the Rust defaults
        rust = atgrpo.EnvPool(task, 1).config
        del rust["max_steps"]
        assert load_config(None, [f"task.task={task}"]).task.env.model_dump() == rust
    for task in ("code", "math"):
        assert load_config(None, [f"task.task={task}"]).task.env_params() == {}


@pytest.mark.parametrize("task", [t for t in TASK_ROLES if t in atgrpo.TASKS])
def test_env_keys_are_the_pools_keys(task: str):
    assert set(TASK_ENV[task].model_fields) == set(atgrpo.EnvPool(task, 1).config) - {"max_steps"}
    cfg = load_config(None, [f"task.task={task}"])
    pool = atgrpo.EnvPool(task, 1, **cfg.task.env_params(), max_steps=cfg.task.turns)
    assert {k: v for k, v in pool.config.items() if k != "max_steps"}.items() >= cfg.task.env_params().items()


def test_another_tasks_keys_are_refused():
    with pytest.raises(ValidationError, match=r"unknown key\(s\) \['height'\] for task sudoku"):
        load_config(None, ["task.task=sudoku", "task.env.height=6"])
    with pytest.raises(ValidationError, match="task.turns"):
        load_config(None, ["task.env.max_steps=8"])
    with pytest.raises(ValidationError, match="unknown key"):
        load_config(None, ["task.task=code", "task.env.width=6"])


BOUNDS = {  # (task, env keys, valid for the pool)
    "planpath": [
        ({"width": 2, "height": 2, "min_distance": 1}, True),
        ({"width": 32, "height": 32}, True),
        ({"obstacle_ratio": 0.0}, True),
        ({"obstacle_ratio": 0.8}, True),
        ({"min_distance": 18}, True),
        ({"width": 1}, False),
        ({"height": 33}, False),
        ({"obstacle_ratio": 0.81}, False),
        ({"obstacle_ratio": -0.1}, False),
        ({"min_distance": 0}, False),
        ({"min_distance": 19}, False),
    ],
    "sokoban": [
        ({"width": 5, "height": 5}, True),
        ({"width": 16, "height": 16, "boxes": 4}, True),
        ({"wall_ratio": 0.5}, True),
        ({"min_pushes": 5, "max_pushes": 5}, True),
        ({"max_solver_states": 1000}, True),
        ({"max_solver_states": 50_000_000}, True),
        ({"width": 4}, False),
        ({"height": 17}, False),
        ({"boxes": 0}, False),
        ({"boxes": 5}, False),
        ({"wall_ratio": 0.51}, False),
        ({"min_pushes": 0}, False),
        ({"min_pushes": 5, "max_pushes": 4}, False),
        ({"max_solver_states": 999}, False),
        ({"max_solver_states": 50_000_001}, False),
        ({"width": 5, "height": 5, "boxes": 4, "wall_ratio": 0.5}, False),
    ],
    "sudoku": [
        ({"clues": 4}, True),
        ({"clues": 15}, True),
        ({"size": 9, "clues": 17}, True),
        ({"size": 9, "clues": 80}, True),
        ({"size": 9}, True),
        ({"size": 5}, False),
        ({"clues": 3}, False),
        ({"clues": 16}, False),
        ({"size": 9, "clues": 16}, False),
        ({"size": 9, "clues": 81}, False),
    ],
}


@pytest.mark.parametrize(("task", "keys", "valid"), [(t, k, v) for t, cases in BOUNDS.items() for k, v in cases])
def test_env_bounds_match_the_pool(task: str, keys: dict, valid: bool):
    overrides = [f"task.task={task}", *(f"task.env.{k}={v}" for k, v in keys.items())]
    if valid:
        cfg = load_config(None, overrides)
        atgrpo.EnvPool(task, 1, **cfg.task.env_params())
    else:
        with pytest.raises(ValidationError):
            load_config(None, overrides)
        with pytest.raises(InvalidConfigError):
            atgrpo.EnvPool(task, 1, **{**TASK_ENV[task]().params(), **keys})


def test_eval_switch_of_task_takes_the_new_tasks_env():
    data = RunConfig().model_dump()
    data["task"].update(task="sokoban", roles=None, env=None)
    assert RunConfig.model_validate(data).task.env == load_config(None, ["task.task=sokoban"]).task.env


# ---- documentation and TOML writing ----


def _models() -> list[type[BaseModel]]:
    import atgrpo.config as c
    import atgrpo.config.sections as s
    import atgrpo.config.task_env as e

    return [
        m
        for mod in (c, s, e)
        for _, m in inspect.getmembers(mod, inspect.isclass)
        if issubclass(m, BaseModel) and m.__module__.startswith("atgrpo.config")
    ]


def test_every_field_has_a_docstring():
    missing = []
    for model in _models():
        for klass in model.__mro__:
            if not klass.__module__.startswith("atgrpo.config") or not klass.__dict__.get("__annotations__"):
                continue
            body = ast.parse(inspect.getsource(klass)).body[0].body  # type: ignore[attr-defined]
            for i, node in enumerate(body):
                if (
                    isinstance(node, ast.AnnAssign)
                    and isinstance(node.target, ast.Name)
                    and node.target.id != "model_config"
                ):
                    doc = body[i + 1] if i + 1 < len(body) else None
                    if not (
                        isinstance(doc, ast.Expr)
                        and isinstance(doc.value, ast.Constant)
                        and str(doc.value.value).strip()
                    ):
                        missing.append(f"{klass.__name__}.{node.target.id}")
    assert not missing, f"fields without a docstring: {sorted(set(missing))}"


def test_toml_writer_round_trips_awkward_values():
    import tomllib

    data = {
        "a": {
            "s": 'quote " back \\ tab \t nl \n del \x7f é',
            "f": [1e-6, 1e16, 0.1, -0.0],
            "i": -3,
            "b": False,
            "l": ["x", "y"],
            "none": None,
            "key with space": {"x": 1},
        },
        "empty": {},
    }
    back = tomllib.loads(to_toml(data))
    assert back["a"]["s"] == data["a"]["s"] and back["a"]["f"] == data["a"]["f"] and "none" not in back["a"]
    assert back["a"]["key with space"] == {"x": 1} and back["empty"] == {} and back["a"]["l"] == ["x", "y"]
    assert math.isinf(tomllib.loads(to_toml({"x": float("inf")}))["x"])
