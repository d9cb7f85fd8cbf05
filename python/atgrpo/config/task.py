"""The `[task]` section: which task, its agents, its prompts, and its typed env parameters.

`task.env` is validated by the model of the chosen task (`atgrpo.config.task_env.TASK_ENV`); when it
is not given, it is that task's defaults, so switching `task.task` never carries another task's keys.

Agents. `roles` names the roles in turn order; `team` (math) gives several agents (instances) of a
role, e.g. `{ tool = 1, reasoner = 3, judge = 1 }`. The agents in turn order are `agents()`: each
role's instances one after another, in `roles` order. An instance is named by its role when the role
has one (so a team of one per role is exactly the roles, as before), else `<role>_<i>`, i from 1.
An agent's position in `agents()` is its agent index in the group key (env, agent, turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from atgrpo.config.sections import Section
from atgrpo.config.task_env import AnyTaskEnv, task_env

JUDGE = "judge"
"""The role that reads the other agents' answers and gives the team's (math; at most one, acting last)."""
TEAM_MAX = 16
"""Most agents of one role: the team's prompts and samples grow linearly with it."""

TASK_ROLES: dict[str, tuple[list[str], set[str], set[str]]] = {
    # task: (default roles in turn order, allowed roles, roles of which at least one must be present)
    "planpath": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "sokoban": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "sudoku": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "code": (["coder", "tester"], {"coder", "tester"}, {"coder"}),
    "math": (["tool", "reasoner"], {"tool", "reasoner", JUDGE}, {"tool", "reasoner"}),
}
GAME_TASKS = ("planpath", "sokoban", "sudoku")
"""Tasks played on the Rust env pool (the others read problem files)."""
TEAM_TASKS = ("math",)
"""Tasks whose workflow takes several agents of one role (`team`) and a judge."""


@dataclass(frozen=True)
class Agent:
    """One agent of the team: an instance of a role."""

    name: str
    """Its name: the role when the role has one instance, else `<role>_<i>` (i from 1). Samples carry
    it as their `role`; `role_policy` may map it to a policy of its own."""
    role: str
    """Its role: which prompt it gets and what its answers do."""
    index: int
    """Its position among its role's instances, from 0."""


def instance_name(role: str, index: int, count: int) -> str:
    return role if count == 1 else f"{role}_{index + 1}"


class TaskSection(Section):
    task: Literal["planpath", "sokoban", "sudoku", "code", "math"] = "planpath"
    """The task: a game on the env pool (planpath, sokoban, sudoku) or a problem set (code, math)."""
    env: AnyTaskEnv = Field(default=None, validate_default=False)  # type: ignore[assignment]
    """Env parameters of the task (games: `PlanPathEnv`, `SokobanEnv`, `SudokuEnv`; code and math:
    none), as a TOML table `[task.env]`; keys not given take the task's defaults. The turn limit is
    `turns`, not an env key. See envs/<task>/README.md."""
    roles: list[str] | None = None
    """Roles in turn order; one role is the single-agent baseline. None: the task's default, games
    ["tool", "plan"], code ["coder", "tester"], math ["tool", "reasoner"] (or the roles of `team`).
    Math may end with "judge", who reads the others' answers and gives the team's."""
    team: dict[str, int] | None = None
    """Math: agents per role, e.g. `{ tool = 1, reasoner = 3, judge = 1 }` (a TOML table `[task.team]`);
    its keys are the roles (turn order: `roles` if given, else the task's order with the judge last).
    None: one agent per role of `roles`. See `agents()` and docs/code-and-math.md "Teams"."""
    turns: int = Field(default=4, ge=1)
    """T: the most turns of an episode (every agent acts once per turn); the env pool's `max_steps`."""
    prompts: Literal["compact", "compact_turn", "paper"] = "compact"
    """Template set under envs/<task>/prompts/: compact (short, for the tiny model), compact_turn (games:
    compact with the turn number, so a greedy team that returns to a state it stood on is not shown
    the same prompt again) or paper (chat models; they show the turn too)."""
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
            order = [*default, JUDGE]  # a team's roles in the task's order, the judge last
            roles = default if self.team is None else [r for r in order if r in self.team]
            object.__setattr__(self, "roles", list(roles))
        roles = self.roles or []
        unknown = set(roles) - allowed
        if unknown or not roles or len(set(roles)) != len(roles):
            raise ValueError(f"roles must be distinct names among {sorted(allowed)}; got {roles}")
        if not needed & set(roles):
            raise ValueError(f"roles of task {self.task} must include one of {sorted(needed)}; got {roles}")
        if JUDGE in roles and roles[-1] != JUDGE:
            raise ValueError(f"the judge acts last in a turn; got roles {roles}")
        if self.prompts == "compact_turn" and self.task not in GAME_TASKS:
            raise ValueError(
                f"task.prompts = 'compact_turn' is for the games {list(GAME_TASKS)}; task {self.task} "
                "takes 'compact' or 'paper'"
            )
        if self.team is not None:
            self._check_team()
        return self

    def _check_team(self) -> None:
        team = self.team or {}
        if self.task not in TEAM_TASKS:
            raise ValueError(f"task.team: task {self.task} takes one agent per role (teams: {list(TEAM_TASKS)})")
        if set(team) != set(self.roles or []):
            raise ValueError(
                f"task.team names roles {sorted(team)} but task.roles is {self.roles}: give the same roles"
            )
        bad = {r: n for r, n in team.items() if not 1 <= n <= TEAM_MAX}
        if bad:
            raise ValueError(f"task.team: every role has 1..{TEAM_MAX} agents; got {bad}")
        if team.get(JUDGE, 1) != 1:
            raise ValueError(f"task.team: one judge at most; got {team[JUDGE]}")

    def agents(self) -> list[Agent]:
        """The team's agents in turn order: each role's instances in turn, roles in `roles` order."""
        team = self.team or {}
        return [
            Agent(instance_name(role, i, team.get(role, 1)), role, i)
            for role in self.roles or []
            for i in range(team.get(role, 1))
        ]

    def env_params(self) -> dict[str, Any]:
        """Keyword arguments for `EnvPool(self.task, n, **params)`, without `max_steps` (that is `turns`).
        Empty for code and math."""
        return self.env.params()
