"""`make_workflow(cfg)`: the workflow of the config's task, as the actor, the trainer and `atgrpo-eval` use it.

Every workflow is a `base.Workflow`: `run(unit, policies, sampling, run_id=, seed=, on_groups=) ->
UnitResult` and `close()`; the code and math workflows (and the games in program mode) hold a
sandbox until `close()`.
"""

from __future__ import annotations

from atgrpo.config import GAME_TASKS, RunConfig
from atgrpo.workflows.base import Workflow
from atgrpo.workflows.code import CodeWorkflow
from atgrpo.workflows.games import GameWorkflow
from atgrpo.workflows.math import MathWorkflow


def make_workflow(cfg: RunConfig) -> Workflow:
    task = cfg.task.task
    if task in GAME_TASKS:
        return GameWorkflow(cfg)
    if task == "code":
        return CodeWorkflow(cfg)
    if task == "math":
        return MathWorkflow(cfg)
    raise ValueError(f"no workflow for task {task!r}")


__all__ = ["Workflow", "make_workflow"]
