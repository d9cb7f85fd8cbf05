"""The Rust pool and the pure-Python reference agree exactly: same seeds and actions give identical
observations, rewards (bit-for-bit) and done flags. Hypothesis picks seeds, splits and actions."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pool_vs_reference import step_both

import atgrpo
from atgrpo.envs.reference import make_episode

CONFIGS = {
    "planpath": [
        {},
        {"width": 6, "height": 4, "obstacle_ratio": 0.3, "min_distance": 2},
        {"width": 5, "height": 5, "obstacle_ratio": 0.2, "min_distance": 2, "stop_at_goal": False},
        {
            "width": 5,
            "height": 5,
            "obstacle_ratio": 0.2,
            "min_distance": 2,
            "stop_at_goal": False,
            "optimal_bonus": 0.5,
        },
        {"optimal_bonus": -0.25, "invalid_move_penalty": 0.0},
    ],
    "sokoban": [{}, {"width": 7, "height": 6, "boxes": 2, "reverse_steps": 60}],
    "sudoku": [{}, {"size": 9, "clues": 34}],
}

move_word = st.sampled_from(["U", "D", "L", "R", "up", "Down", "LEFT", "right", "X", "", "UU"])
move_list = st.lists(move_word, max_size=12).map(lambda ws: "#### [" + ", ".join(ws) + "]")
actions_list = st.lists(st.sampled_from(["U", "D", "L", "R"]), min_size=1, max_size=6).map(
    lambda ws: "**Actions List**: [" + ", ".join(f'"{w}"' for w in ws) + "]"
)
triples = st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=6).map(
    lambda ts: "#### [" + ", ".join(f"({r}, {c}, {v})" for r, c, v in ts) + "]"
)
grid = st.lists(st.sampled_from("0123456789._"), min_size=16, max_size=81).map(lambda cs: "####\n" + " ".join(cs))
noise = st.one_of(st.text(max_size=40), st.binary(max_size=20), st.none(), st.just("\ud800"))
action = st.one_of(move_list, actions_list, triples, grid, noise, st.just("SOLVE"))


def _run(task: str, cfg: dict, seed: int, split: str, actions: list) -> None:
    cfg = {**cfg, "max_steps": 6}
    pool = atgrpo.EnvPool(task, 1, **cfg)
    obs = pool.reset([0], [seed], split).obs[0]
    ref = make_episode(task, cfg, seed, split)
    assert obs == ref.state.render()
    assert pool.solve([0]).optimal_len[0] == ref.state.optimal_len()
    for act in actions:
        if act == "SOLVE":
            act = pool.solve([0]).plans[0]
        got, want, rec = step_both(pool, ref, act)
        assert got == want, f"{task} {cfg} seed={seed} split={split} action={act!r}"
        if rec.done:
            break


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    task_cfg=st.sampled_from([(t, c) for t, cs in CONFIGS.items() for c in cs]),
    seed=st.integers(0, 2**64 - 1),
    split=st.sampled_from(["train", "eval"]),
    actions=st.lists(action, min_size=1, max_size=8),
)
def test_rust_pool_matches_python_reference(task_cfg: tuple, seed: int, split: str, actions: list) -> None:
    task, cfg = task_cfg
    _run(task, cfg, seed, split, actions)


def test_generation_matches_reference_on_many_seeds() -> None:
    for task, cfgs in CONFIGS.items():
        for cfg in cfgs:
            pool = atgrpo.EnvPool(task, 20, **cfg)
            for split in ("train", "eval"):
                obs = pool.reset(np.arange(20), np.arange(20) * 7919, split).obs
                lens = pool.solve(np.arange(20)).optimal_len
                for i in range(20):
                    ref = make_episode(task, cfg, i * 7919, split)
                    assert ref.state.render() == obs[i], (task, cfg, split, i)
                    assert ref.state.optimal_len() == lens[i]
