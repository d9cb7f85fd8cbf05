"""The shipped program-mode configs (`envs/<task>/train_program.toml`): their context holds the longest
plan prompt program mode can make and the tool's prompt with its budget, and the paper's single
agent (the planner alone, no tool) is one override away."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from atgrpo.config import load_config
from atgrpo.envs import EnvPool
from atgrpo.models.tokenizer import build_tokenizer
from atgrpo.warmstart.program_demos import strategies, strategy_program
from atgrpo.workflows.games import PLAN, TOOL, TOOL_ANSWER_CHARS, GameWorkflow
from atgrpo.workflows.states import Simulation

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {task: ROOT / "envs" / task / "train_program.toml" for task in ("planpath", "sudoku")}
SINGLE_AGENT = ['task.roles=["plan"]']
"""The `sa_*` arms' line-up (`bench.learning.suites.SA`)."""


@pytest.mark.parametrize("task", sorted(CONFIGS))
def test_the_context_holds_the_longest_prompts_with_their_budgets(task: str) -> None:
    cfg = load_config(CONFIGS[task])
    assert cfg.task.tool_mode == "program" and cfg.policies["shared"].tiny.tokenizer == "program"
    tok = build_tokenizer("program")
    wf = GameWorkflow(cfg)
    pool = EnvPool(task, 4, **wf.env_config)
    try:
        obs = pool.reset(np.arange(4), np.arange(4), "train").obs
    finally:
        pool.close()
    budgets = cfg.agent_max_new_tokens()
    context = cfg.policies["shared"].tiny.max_positions
    # The longest output note the plan agent is shown (it is shown the output, not the program).
    shown = ("#### [U, R, D, L]" * 20)[:TOOL_ANSWER_CHARS]
    for o in obs:
        plan = wf.prompt_text(PLAN, o, 0, Simulation(0, shown, False, False, 0.0))
        assert len(tok.encode(plan, add_special_tokens=False)) + budgets[PLAN] <= context
        tool = wf.prompt_text(TOOL, o, 0, None)
        assert len(tok.encode(tool, add_special_tokens=False)) + budgets[TOOL] <= context
    longest_demo = max(len(tok.encode(strategy_program(task, o, s))) for o in obs for s in strategies(task))
    assert longest_demo < budgets[TOOL]  # every demo program fits the tool's budget, with its end token


@pytest.mark.parametrize("task", sorted(CONFIGS))
def test_the_single_agent_arms_are_overrides_of_the_program_configs(task: str) -> None:
    sa = load_config(CONFIGS[task], SINGLE_AGENT)
    assert sa.task.roles == ["plan"] and sa.role_policy == {"plan": "shared"}
    assert sa.agent_max_new_tokens() == {"plan": sa.rollout.max_new_tokens}  # the tool's budget serves no one
    grpo = load_config(CONFIGS[task], [*SINGLE_AGENT, 'rollout.sampling="parallel"', 'rollout.grouping="trajectory"'])
    assert (grpo.rollout.sampling, grpo.rollout.grouping) == ("parallel", "trajectory")
