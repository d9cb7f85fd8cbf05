"""Branch states of one unit, K per env, in the two forms the turn loop (`tree.py`) works on.

- `PoolStates` (games): branch b of env e lives in slot `e * K + b` of an `EnvPool` the states own
  for one `run`; carrying a branch forks its slot into the env's other slots. A simulated role (the
  games' tool agent) acts on a scratch slot (slot + n * K) forked from its branch just before, so
  the real state is untouched; what the simulation gave (`Simulation`) is part of the branch's state,
  shown to the later roles of the same turn and carried like the rest. When the game's answers
  are programs, what each did is counted from its run and that simulation (`Outcomes.tool_programs`).
- `TextStates` (code, math): immutable Python states (frozen dataclasses), so applying an answer
  makes a new state and carrying a branch is an assignment. Env seed s is problem s mod len(problems)
  of the split's problem set; reward = alpha * team + local.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, Sequence, TypeVar

import numpy as np

from atgrpo.config import RunConfig
from atgrpo.envs import EnvPool
from atgrpo.messages import WorkUnit
from atgrpo.workflows.programs import LazySandbox, PrintedOutput
from atgrpo.workflows.prompts import envs_dir
from atgrpo.workflows.tool_programs import count_programs
from atgrpo.workflows.tree import Live, Outcomes, TreeWorkflow

if TYPE_CHECKING:
    from atgrpo.sandbox import Sandbox

S = TypeVar("S")


@dataclass(frozen=True)
class Simulation:
    """A simulated step of one branch: the answer as later roles are shown it and what it did."""

    turn: int
    answer: str
    success: bool
    valid: bool
    local: float


class Game(Protocol):
    """What `PoolStates` needs of a game workflow."""

    task: str
    roles: list[str]
    env_config: dict[str, Any]

    def simulated(self, role: str) -> bool:
        """`role`'s answers are simulated on a copy of the state, not executed on it."""
        ...

    def prompt_text(self, role: str, obs: str, turn: int, simulation: Simulation | None) -> str: ...

    def actions(self, role: str, texts: list[str]) -> tuple[list[str], list[str], list[PrintedOutput] | None]:
        """(the env action of each answer, what later roles are shown of it, and when the answers are
        programs, each one's run)."""
        ...


class PoolStates:
    """Game branches in one `EnvPool`, released by `close()`."""

    def __init__(self, game: Game, unit: WorkUnit, k: int) -> None:
        self.game = game
        n = len(unit.seeds)
        banks = 2 if any(game.simulated(r) for r in game.roles) else 1
        self.pool = EnvPool(game.task, n * k * banks, **game.env_config)
        try:
            self.slots = np.arange(n * k, dtype=np.int64).reshape(n, k)
            self.scratch = self.slots + n * k
            self.pool.reset(self.slots.ravel(), np.repeat(np.asarray(unit.seeds, dtype=np.uint64), k), unit.split)
        except BaseException:
            self.pool.close()
            raise
        self.simulations: dict[tuple[int, int], Simulation] = {}
        self.shown: dict[tuple[int, int], str] = {}
        """The observation each branch's last prompt showed (`describe`)."""

    def prompt_texts(self, role: str, live: Live, turn: int) -> list[str]:
        obs = self.pool.render(np.array([self.slots[e, b] for e, b in live]))
        texts = []
        for o, eb in zip(obs, live):
            self.shown[eb] = o
            sim = self.simulations.get(eb)
            texts.append(self.game.prompt_text(role, o, turn, sim if sim is not None and sim.turn == turn else None))
        return texts

    def apply(self, role: str, live: Live, turn: int, texts: list[str]) -> Outcomes:
        actions, shown, runs = self.game.actions(role, texts)
        simulated = self.game.simulated(role)
        if simulated:
            for e, b in live:
                self.pool.fork(int(self.slots[e, b]), [int(self.scratch[e, b])])
        target = self.scratch if simulated else self.slots
        res = self.pool.step(np.array([target[e, b] for e, b in live]), actions)
        if simulated:
            for i, eb in enumerate(live):
                self.simulations[eb] = Simulation(
                    turn, shown[i], bool(res.success[i]), bool(res.valid[i]), float(res.reward_local[i])
                )
        programs = None
        if runs is not None:
            g = self.game
            programs = count_programs(runs, actions, res.valid, res.success, task=g.task, env_config=g.env_config)
        return Outcomes(
            res.reward,
            res.reward_team,
            res.reward_local,
            res.done,
            res.success,
            episode=not simulated,
            tool_programs=programs,
        )

    def carry(self, role: str, env: int, best: int) -> None:
        k = self.slots.shape[1]
        if self.game.simulated(role):  # the real state did not change; the simulation did
            for b in range(k):
                self.simulations[(env, b)] = self.simulations[(env, best)]
            return
        others = [int(self.slots[env, b]) for b in range(k) if b != best]
        if others:
            self.pool.fork(int(self.slots[env, best]), others)

    def describe(self, name: str, env: int, branch: int) -> dict[str, object]:
        """The observation agent `name` was shown in this turn's prompt (transcripts; `revisited`), and
        for a simulated agent (the tool) what its answer showed the later roles (in program mode the
        program and what it printed) and what it did alone on the copy. Called right after the agent's
        answers were applied, before any carry: the branch's simulation is this answer's."""
        row: dict[str, object] = {"obs": self.shown.get((env, branch), "")}
        sim = self.simulations.get((env, branch))
        if self.game.simulated(name) and sim is not None:
            row.update(shown=sim.answer, alone_valid=sim.valid, alone_success=sim.success)
        return row

    def close(self) -> None:
        self.pool.close()


@dataclass(frozen=True)
class Outcome(Generic[S]):
    """What one candidate did in a text task: its new state and the reward parts read from that state."""

    state: S
    team: float
    local: float
    done: bool
    success: bool


class TextStates(Generic[S]):
    """Code and math branches: `states[e][b]`, immutable."""

    def __init__(self, task: "TextWorkflow[S]", problems: list[Any], k: int) -> None:
        self.task = task
        self.problems = problems
        self.states: list[list[S]] = [[task.initial_state(p)] * k for p in problems]

    def prompt_texts(self, role: str, live: Live, turn: int) -> list[str]:
        return [self.task.prompt_text(role, self.problems[e], self.states[e][b], turn) for e, b in live]

    def apply(self, role: str, live: Live, turn: int, texts: list[str]) -> Outcomes:
        results = self.task.apply(role, [(self.problems[e], self.states[e][b], t) for (e, b), t in zip(live, texts)])
        for (e, b), r in zip(live, results):
            self.states[e][b] = r.state
        alpha = self.task.alpha
        return Outcomes(
            reward=np.array([alpha * r.team + r.local for r in results], dtype=np.float64),
            team=np.array([r.team for r in results], dtype=np.float64),
            local=np.array([r.local for r in results], dtype=np.float64),
            done=np.array([r.done for r in results], dtype=bool),
            success=np.array([r.success for r in results], dtype=bool),
        )

    def carry(self, role: str, env: int, best: int) -> None:
        self.states[env] = [self.states[env][best]] * len(self.states[env])

    def describe(self, name: str, env: int, branch: int) -> dict[str, object]:
        """What agent `name` did in branch `branch` of `env`, as the workflow reports it (transcripts)."""
        return self.task.describe(name, self.states[env][branch])

    def close(self) -> None:
        """Nothing to release: the states are plain Python values."""


class TextWorkflow(TreeWorkflow, Generic[S]):
    """Base of the code and math workflows: problems from a dataset, immutable states. Subclasses set
    `task` and `load_problems` and implement `initial_state`, `prompt_text` and `apply`."""

    task: str = ""

    load_problems: Callable[[Path, str], Sequence[Any]]
    """Subclasses: the dataset loader, `(path, format) -> problems` (a `staticmethod`)."""

    def __init__(self, cfg: RunConfig, problems: dict[str, Sequence[Any]] | None = None) -> None:
        super().__init__(cfg)
        self.alpha = cfg.task.alpha
        self._problems: dict[str, Sequence[Any]] = dict(problems or {})
        self._sandbox = LazySandbox(cfg)

    # -- hooks ------------------------------------------------------------------------------------
    def initial_state(self, problem: Any) -> S:
        raise NotImplementedError

    def prompt_text(self, role: str, problem: Any, state: S, turn: int) -> str:
        raise NotImplementedError

    def apply(self, role: str, items: list[tuple[Any, S, str]]) -> list[Outcome[S]]:
        """Apply each (problem, state, candidate text); one `Outcome` per item, in order. Never raises
        for anything the model wrote."""
        raise NotImplementedError

    def describe(self, name: str, state: S) -> dict[str, object]:
        """What agent `name` did in `state`, as plain JSON values (transcripts); nothing by default."""
        return {}

    # -- shared -----------------------------------------------------------------------------------
    def problems(self, split: str) -> Sequence[Any]:
        """The split's problem set: `task.eval_dataset` for eval, else `task.dataset`, else the task
        pack's `envs/<task>/problems.jsonl`; loaded once."""
        if split not in self._problems:
            t = self.cfg.task
            path = (
                (t.eval_dataset if split == "eval" else None) or t.dataset or envs_dir() / self.task / "problems.jsonl"
            )
            self._problems[split] = self.load_problems(Path(path), t.dataset_format)
        return self._problems[split]

    def problem_of(self, seed: int, split: str) -> Any:
        probs = self.problems(split)
        if not probs:
            raise ValueError(f"{self.task}: the {split} problem set is empty")
        return probs[int(seed) % len(probs)]

    def open(self, unit: WorkUnit, k: int) -> TextStates[S]:
        return TextStates(self, [self.problem_of(s, unit.split) for s in unit.seeds], k)

    @property
    def sandbox(self) -> "Sandbox":
        """The workflow's sandbox, started on first use."""
        return self._sandbox.get()

    def close(self) -> None:
        """Release the sandbox, if one was started (idempotent)."""
        self._sandbox.close()


__all__ = ["Game", "Outcome", "PoolStates", "Simulation", "TextStates", "TextWorkflow"]
