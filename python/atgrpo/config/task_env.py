"""Per-task environment parameters: one pydantic model per task, chosen by `task.task`.

Each game model mirrors the Rust config struct of its task (`rust/envs/src/<task>`) plus the keys
every task shares (`Common` in `rust/envs/src/task.rs`), with the same names, types and valid ranges,
so a config that validates here builds an `EnvPool`. `max_steps` is not among them: the pool's turn
limit is always `task.turns`, set by the workflow. Code and math read problem files, not an env pool,
and take no parameters (`TextTaskEnv`, always empty).

The defaults are the Rust defaults, except Plan-Path's, which are the CPU demo's (6x6, 25% obstacles,
a move list must end on the goal, no per-move penalty).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class EnvParams(BaseModel):
    """Base of every task's env parameters. `params()` is what `EnvPool(task, n, **params)` takes."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    def params(self) -> dict[str, Any]:
        """The keyword arguments for `EnvPool` (unset optional keys left out, so the pool's default holds)."""
        return self.model_dump(exclude_none=True)


class TextTaskEnv(EnvParams):
    """Code and math: no env parameters (problems come from `task.dataset`)."""


class GameEnv(EnvParams):
    """Keys shared by every game (Rust `Common`, without `max_steps`, which is `task.turns`)."""

    max_moves: int = Field(default=256, ge=1, le=2**32 - 1)
    """Most moves (or cell assignments) one answer may hold; a longer answer is unparseable."""
    alpha: float = 1.0
    """Weight of the team reward: reward = alpha * team + local (the paper uses 1)."""
    success_bonus: float = 1.0
    """Team reward on the step that solves the level."""
    invalid_move_penalty: float = -0.05
    """Local reward added once per illegal move (the move is skipped); usually <= 0."""
    parse_penalty: float = -0.5
    """Local reward of an unparseable answer (the state is left unchanged); usually <= 0."""


class PlanPathEnv(GameEnv):
    """Plan-Path: reach the goal cell of a grid with obstacles (envs/planpath/README.md)."""

    width: int = Field(default=6, ge=2, le=32)
    """Grid columns, 2..32."""
    height: int = Field(default=6, ge=2, le=32)
    """Grid rows, 2..32."""
    obstacle_ratio: float = Field(default=0.25, ge=0.0, le=0.8)
    """Fraction of cells that are obstacles (floor(ratio * width * height) of them), 0..0.8."""
    min_distance: int = Field(default=3, ge=1)
    """Smallest shortest-path distance from start to goal, in moves; 1..width*height//2."""
    stop_at_goal: bool = False
    """True: reaching the goal ends the move list. False: every move runs, so only a list that ends
    on the goal solves the level (passing over it does not count)."""
    invalid_move_penalty: float = 0.0
    """Local reward added once per illegal move (off the grid or into an obstacle; the move is skipped)."""
    optimal_bonus: float = 0.0
    """Local reward added to an answer that reaches the goal by a shortest walk from where it started
    (as many moves as the BFS distance, none illegal): the paper's optimal-path bonus. 0: none."""

    @model_validator(mode="after")
    def _distance_fits(self) -> "PlanPathEnv":
        most = self.width * self.height // 2
        if self.min_distance > most:
            raise ValueError(
                f"min_distance must be in 1..={most} for a {self.width}x{self.height} grid, got {self.min_distance}"
            )
        return self


class SokobanEnv(GameEnv):
    """Sokoban: push every box onto a target (envs/sokoban/README.md)."""

    width: int = Field(default=6, ge=5, le=16)
    """Grid columns including the border wall, 5..16."""
    height: int = Field(default=6, ge=5, le=16)
    """Grid rows including the border wall, 5..16."""
    boxes: int = Field(default=1, ge=1, le=4)
    """Number of boxes (and targets), 1..4."""
    wall_ratio: float = Field(default=0.15, ge=0.0, le=0.5)
    """Fraction of interior cells turned into walls, 0..0.5."""
    reverse_steps: int = Field(default=40, ge=0, le=2**32 - 1)
    """Random player moves (with pulls) played backwards from the solved position to make a level."""
    min_pushes: int = Field(default=2, ge=1, le=2**32 - 1)
    """Fewest pushes an accepted level may need (<= max_pushes)."""
    max_pushes: int = Field(default=40, ge=1, le=2**32 - 1)
    """Most pushes an accepted level may need."""
    max_solver_states: int = Field(default=200_000, ge=1_000, le=50_000_000)
    """Node budget of the solver, when generating and in `solve`, 1000..50000000."""

    @model_validator(mode="after")
    def _room_fits(self) -> "SokobanEnv":
        interior = (self.width - 2) * (self.height - 2)
        walls = int(self.wall_ratio * interior)
        if interior < walls + self.boxes + 2:
            raise ValueError(f"a {self.width}x{self.height} room with these walls has no space for {self.boxes} boxes")
        if self.min_pushes > self.max_pushes:
            raise ValueError(f"need min_pushes <= max_pushes, got {self.min_pushes} > {self.max_pushes}")
        return self


class SudokuEnv(GameEnv):
    """Sudoku: fill the grid (envs/sudoku/README.md)."""

    size: Literal[4, 9] = 4
    """Side of the grid: 4 (2x2 boxes) or 9 (3x3 boxes)."""
    clues: int | None = None
    """Target number of givens: 4..15 for 4x4, 17..80 for 9x9; None: 6 for 4x4, 30 for 9x9. Where no
    further given can be removed with the solution staying unique, a puzzle keeps more."""

    @model_validator(mode="after")
    def _clues_fit(self) -> "SudokuEnv":
        lowest, cells = (4, 16) if self.size == 4 else (17, 81)
        if self.clues is not None and not lowest <= self.clues < cells:
            raise ValueError(f"clues must be in {lowest}..={cells - 1} for size {self.size}, got {self.clues}")
        return self


TASK_ENV: dict[str, type[EnvParams]] = {
    "planpath": PlanPathEnv,
    "sokoban": SokobanEnv,
    "sudoku": SudokuEnv,
    "code": TextTaskEnv,
    "math": TextTaskEnv,
}
"""Task name -> the model of its `task.env` table."""

AnyTaskEnv = PlanPathEnv | SokobanEnv | SudokuEnv | TextTaskEnv


def task_env(task: str, raw: Any) -> EnvParams:
    """`raw` (a dict, None for the task's defaults, or a model) as the env parameters of `task`."""
    model = TASK_ENV[task]
    if raw is None:
        return model()
    if isinstance(raw, EnvParams):
        if type(raw) is not model:
            raise ValueError(f"task.env holds {type(raw).__name__}, but task {task} takes {model.__name__}")
        return raw
    if not isinstance(raw, dict):
        raise ValueError(f"task.env must be a table, got {type(raw).__name__}")
    if "max_steps" in raw:
        raise ValueError("task.env.max_steps cannot be set: the env's turn limit is task.turns")
    unknown = sorted(set(raw) - set(model.model_fields))
    if unknown:
        known = ", ".join(model.model_fields) or "none"
        raise ValueError(f"task.env: unknown key(s) {unknown} for task {task} (its keys: {known})")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'env'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise ValueError(f"task.env of {task}: {details}") from None
