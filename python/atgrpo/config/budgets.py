"""Response budgets per agent: how many tokens one response of each agent may have.

`rollout.max_new_tokens` is every agent's budget unless `rollout.max_new_tokens_per_role` names the
agent (its own entry, as `role_policy` does) or its role. Program mode needs both kinds of answer at
once: a tool program is a few hundred tokens, a planner's answer a few dozen, and giving every role
the program's budget would let every planner sample run on as long.

The one place that resolves an agent's budget: the turn loop generates with it
(`workflows.tree`), the learner's intake refuses a longer response (`learner.intake`), and the
engines hold the longest budget of any agent in each sequence (`engines.factory.sequence_budget`,
through `RolloutSection.longest_response`). The overlong penalty (`rollout.overlong_buffer`) counts
back from each agent's own budget, so the buffer must fit inside the smallest one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from atgrpo.config.task import TASK_ROLES

if TYPE_CHECKING:
    from atgrpo.config import RunConfig


def check_response_budgets(cfg: RunConfig) -> None:
    """ValueError for a `rollout.max_new_tokens_per_role` key that is neither a role of the task nor
    one of its agents, or an `overlong_buffer` longer than an agent's budget (called by
    `RunConfig`'s validation). The task's roles that this line-up does
    not field are let be, as in `role_policy`: one file may serve several line-ups."""
    allowed = TASK_ROLES[cfg.task.task][1]
    agents = [a.name for a in cfg.task.agents()]
    strangers = sorted(set(cfg.rollout.max_new_tokens_per_role) - allowed - set(agents))
    if strangers:
        raise ValueError(
            f"rollout.max_new_tokens_per_role: {strangers} name no role of task {cfg.task.task} "
            f"(roles {sorted(allowed)}) and no agent of this team ({agents})"
        )
    buffer = cfg.rollout.overlong_buffer
    too_short = {a: n for a, n in agent_max_new_tokens(cfg).items() if n < buffer}
    if buffer and too_short:
        raise ValueError(
            f"rollout.overlong_buffer = {buffer} is longer than the response budget of {too_short} "
            "(rollout.max_new_tokens, or its role's in max_new_tokens_per_role): the penalty would start "
            "before the response does"
        )


def budget_overrides(cfg: RunConfig) -> dict[str, int]:
    """Agent name -> its own budget, for the agents `max_new_tokens_per_role` names (by name or role);
    every other agent keeps the caller's `max_new_tokens`."""
    per_role = cfg.rollout.max_new_tokens_per_role
    out = {}
    for agent in cfg.task.agents():
        budget = per_role.get(agent.name, per_role.get(agent.role))
        if budget is not None:
            out[agent.name] = budget
    return out


def agent_max_new_tokens(cfg: RunConfig) -> dict[str, int]:
    """Agent name -> the most tokens one of its responses may have, agents in turn order."""
    overrides = budget_overrides(cfg)
    return {a.name: overrides.get(a.name, cfg.rollout.max_new_tokens) for a in cfg.task.agents()}


__all__ = ["agent_max_new_tokens", "budget_overrides", "check_response_budgets"]
