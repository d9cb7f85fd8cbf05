"""Batched environments (Rust) and their pure-Python reference implementations."""

from atgrpo.envs.pool import TASKS, EnvPool, ResetResult, SolveResult, StatusResult, StepResult

__all__ = ["TASKS", "EnvPool", "ResetResult", "SolveResult", "StatusResult", "StepResult"]
