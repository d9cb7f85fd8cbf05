"""The run config: typed, validated, documented, loaded from TOML with `a.b=value` overrides.

One `RunConfig` describes the whole run; the launcher hands the same file to the learner and to every
actor, each of which reads the sections it needs. Unknown keys are errors (`extra="forbid"`), so a
typo never silently falls back to a default. Sections stay one level deep, except `task.env`, whose
model is chosen by `task.task` (`atgrpo.config.task_env`). `RunConfig.to_toml()` writes the fully
resolved config, which `load_config` reads back to an equal `RunConfig`.

    cfg = load_config("envs/sudoku/task.toml", ["rollout.k=8"])
    EnvPool(cfg.task.task, n, **cfg.task.env_params(), max_steps=cfg.task.turns)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from atgrpo.config.budgets import agent_max_new_tokens, check_response_budgets
from atgrpo.config.engines import check_engines
from atgrpo.config.lora import check_lora
from atgrpo.config.sections import (
    LaunchSection,
    LoraSection,
    MetricsSection,
    PolicySection,
    RolloutSection,
    RunSection,
    Section,
    TinyModelSpec,
    TrainSection,
    TransportSection,
    WarmstartSection,
)
from atgrpo.config.task import GAME_TASKS, JUDGE, TASK_ROLES, TEAM_TASKS, Agent, TaskSection
from atgrpo.config.task_env import TASK_ENV, EnvParams, PlanPathEnv, SokobanEnv, SudokuEnv, TextTaskEnv
from atgrpo.config.toml_io import apply_overrides, read_toml_file, to_toml


class RunConfig(Section):
    run: RunSection = Field(default_factory=RunSection)
    """Identity, length, evaluation and checkpoint cadence of the run."""
    task: TaskSection = Field(default_factory=TaskSection)
    """The task, its agents and its env parameters."""
    policies: dict[str, PolicySection] = Field(default_factory=lambda: {"shared": PolicySection()})
    """Policy name -> model and optimizer. One entry: one shared policy (role prompts on one model)."""
    role_policy: dict[str, str] = Field(default_factory=dict)
    """Role -> policy name. Empty maps every role to the only policy. The agents of a role share its
    policy; a key naming one agent of a team (`reasoner_2`, see `TaskSection.agents`) gives that
    agent a policy of its own."""
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    """How samples are generated: K, sampling, grouping, engine."""
    train: TrainSection = Field(default_factory=TrainSection)
    """The learner: backend, loss and batching."""
    warmstart: WarmstartSection = Field(default_factory=WarmstartSection)
    """Supervised warm start on solver demonstrations before RL (games)."""
    transport: TransportSection = Field(default_factory=TransportSection)
    """Hub address, timeouts and message limits."""
    launch: LaunchSection = Field(default_factory=LaunchSection)
    """Processes and threads `atgrpo-train` starts on this host."""
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    """Metric sinks besides metrics.jsonl."""

    @model_validator(mode="after")
    def _mapping(self) -> "RunConfig":
        roles = self.task.roles or []
        if not self.role_policy:
            if len(self.policies) != 1:
                raise ValueError("with several policies, role_policy must map every role to one of them")
            only = next(iter(self.policies))
            object.__setattr__(self, "role_policy", {r: only for r in roles})
        agents = self.task.agents()
        # Keys of the task's other roles are let be (one file may serve several line-ups), as before teams.
        names = TASK_ROLES[self.task.task][1] | {a.name for a in agents}
        missing = [a.name for a in agents if a.name not in self.role_policy and a.role not in self.role_policy]
        unknown = {p for p in self.role_policy.values() if p not in self.policies}
        strangers = sorted(set(self.role_policy) - names)
        if missing or unknown or strangers:
            raise ValueError(
                f"role_policy: roles without a policy {missing}, unknown policies {sorted(unknown)}, "
                f"keys that are neither a role nor an agent {strangers}"
            )
        unused = set(self.policies) - set(self.agent_policy().values())
        if unused:
            raise ValueError(f"policies {sorted(unused)} serve no role")
        check_lora(self)  # atgrpo.config.lora
        check_engines(self)  # atgrpo.config.engines
        check_response_budgets(self)  # atgrpo.config.budgets
        return self

    def agent_policy(self) -> dict[str, str]:
        """Agent name -> policy, agents in turn order: the agent's own entry of `role_policy`, else its role's."""
        rp = self.role_policy
        return {a.name: rp.get(a.name, rp.get(a.role, "")) for a in self.task.agents()}

    def agent_max_new_tokens(self) -> dict[str, int]:
        """Agent name -> most tokens of one response, agents in turn order: its own entry of
        `rollout.max_new_tokens_per_role`, else its role's, else `rollout.max_new_tokens`."""
        return agent_max_new_tokens(self)

    def roles_of(self, policy: str) -> list[str]:
        """The roles with at least one agent on `policy`."""
        on = {a.role for a in self.task.agents() if self.agent_policy()[a.name] == policy}
        return [r for r in self.task.roles or [] if r in on]

    def to_toml(self) -> str:
        """The fully resolved config as TOML; `load_config` reads it back to an equal `RunConfig`."""
        return dump_config(self)


RESOLVED_HEADER = "atgrpo run config, fully resolved"
"""The first line (as a comment) of a config `dump_config` wrote: every key of its day is in it."""

PREDATED_POLICY_KEYS = {"lr_schedule": "constant", "thinking": None}
"""Policy keys whose default changed after runs had been written without them, and the value those
runs had in effect. A resolved config lacking one predates the key: it gets that value, not today's
default, so resuming (or reading back) an older run never changes what it learned with."""


def dump_config(cfg: RunConfig) -> str:
    """`cfg` fully resolved (defaults, default roles and role mapping written out) as a TOML document."""
    return to_toml(cfg.model_dump(mode="python"), header=RESOLVED_HEADER)


def _fill_predated_keys(data: dict[str, Any]) -> None:
    for policy in (data.get("policies") or {}).values():
        if isinstance(policy, dict):
            for key, value in PREDATED_POLICY_KEYS.items():
                policy.setdefault(key, value)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a TOML file (or the defaults) and apply `section.key=value` overrides (values in TOML syntax).
    A resolved config (`RESOLVED_HEADER`) written before a key of `PREDATED_POLICY_KEYS` existed
    reads back with the value it ran with."""
    data, text = read_toml_file(path)
    if text.partition("\n")[0].strip() == f"# {RESOLVED_HEADER}":
        _fill_predated_keys(data)
    return RunConfig.model_validate(apply_overrides(data, overrides))


__all__ = [
    "GAME_TASKS",
    "JUDGE",
    "PREDATED_POLICY_KEYS",
    "RESOLVED_HEADER",
    "TEAM_TASKS",
    "Agent",
    "TASK_ENV",
    "TASK_ROLES",
    "EnvParams",
    "LaunchSection",
    "LoraSection",
    "MetricsSection",
    "PlanPathEnv",
    "PolicySection",
    "RolloutSection",
    "RunConfig",
    "RunSection",
    "SokobanEnv",
    "SudokuEnv",
    "TaskSection",
    "TextTaskEnv",
    "TinyModelSpec",
    "TrainSection",
    "TransportSection",
    "WarmstartSection",
    "dump_config",
    "load_config",
]
