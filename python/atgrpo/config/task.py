"""The `[task]` section: which task, its agents, its prompts, and its typed env parameters.

`task.env` is validated by the model of the chosen task (`atgrpo.config.task_env.TASK_ENV`); when it
is not given, it is that task's defaults, so switching `task.task` never carries another task's keys.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from atgrpo.config.sections import Section
from atgrpo.config.task_env import AnyTaskEnv, task_env

TASK_ROLES: dict[str, tuple[list[str], set[str], set[str]]] = {
    # task: (default roles in turn order, allowed roles, roles of which at least one must be present)
    "planpath": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "sokoban": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "sudoku": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "code": (["coder", "tester"], {"coder", "tester"}, {"coder"}),
    "math": (["tool", "reasoner"], {"tool", "reasoner"}, {"tool", "reasoner"}),
}
GAME_TASKS = ("planpath", "sokoban", "sudoku")
"""Tasks played on the Rust env pool (the others read problem files)."""


class TaskSection(Section):
    task: Literal["planpath", "sokoban", "sudoku", "code", "math"] = "planpath"
    """The task: a game on the env pool (planpath, sokoban, sudoku) or a problem set (code, math)."""
    env: AnyTaskEnv = Field(default=None, validate_default=False)  # type: ignore[assignment]
    """Env parameters of the task (games: `PlanPathEnv`, `SokobanEnv`, `SudokuEnv`; code and math:
    none), as a TOML table `[task.env]`; keys not given take the task's defaults. The turn limit is
    `turns`, not an env key. See envs/<task>/README.md."""
    roles: list[str] | None = None
    """Agents in turn order; one role is the single-agent baseline. None: the task's default, games
    ["tool", "plan"], code ["coder", "tester"], math ["tool", "reasoner"]."""
    turns: int = Field(default=4, ge=1)
    """T: the most turns of an episode (every agent acts once per turn); the env pool's `max_steps`."""
    prompts: Literal["compact", "paper"] = "compact"
    """Template set under envs/<task>/prompts/: compact (short, for the tiny model) or paper (chat models)."""
    tool_mode: Literal["answer", "program"] = "answer"
    """Games: the tool agent answers a move list (answer) or writes a Python program that prints one,
    run in the sandbox (program)."""
    dataset: str | None = None
    """Code and math: training problem file (None: the task pack's envs/<task>/problems.jsonl)."""
    dataset_format: str = "auto"
    """Format of `dataset` and `eval_dataset` ("auto": guessed; see envs/code/README.md, envs/math/README.md)."""
    eval_dataset: str | None = None
    """Code and math: held-out problem file (None: the training set). Env seed s is problem s mod len."""
    alpha: float = 1.0
    """Code and math: reward = alpha * team + local (games: `env.alpha`)."""
    sandbox_timeout_s: float = Field(default=5.0, gt=0.0)
    """Wall-clock seconds per test of a program run in the sandbox (code, math tool agent, program mode)."""

    @model_validator(mode="before")
    @classmethod
    def _typed_env(cls, data: Any) -> Any:
        if isinstance(data, dict):
            task = data.get("task", "planpath")
            if isinstance(task, str) and task in TASK_ROLES:
                data = {**data, "env": task_env(task, data.get("env"))}
        return data

    @model_validator(mode="after")
    def _roles_known(self) -> "TaskSection":
        task_env(self.task, self.env)  # an assigned env must be of this task
        default, allowed, needed = TASK_ROLES[self.task]
        if self.roles is None:
            object.__setattr__(self, "roles", list(default))
        roles = self.roles or []
        unknown = set(roles) - allowed
        if unknown or not roles or len(set(roles)) != len(roles):
            raise ValueError(f"roles must be distinct names among {sorted(allowed)}; got {roles}")
        if not needed & set(roles):
            raise ValueError(f"roles of task {self.task} must include one of {sorted(needed)}; got {roles}")
        return self

    def env_params(self) -> dict[str, Any]:
        """Keyword arguments for `EnvPool(self.task, n, **params)`, without `max_steps` (that is `turns`).
        Empty for code and math."""
        return self.env.params()
