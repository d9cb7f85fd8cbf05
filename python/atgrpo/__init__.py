"""atgrpo: on-policy AT-GRPO training for teams of cooperating LLM agents.

Import from here (or `atgrpo.envs`, `atgrpo.kernels`, `atgrpo.errors`), never from `atgrpo._core`.
"""

from atgrpo import errors, kernels
from atgrpo._core import __version__
from atgrpo.envs import TASKS, EnvPool, StepResult

__all__ = ["TASKS", "EnvPool", "StepResult", "__version__", "errors", "kernels"]
