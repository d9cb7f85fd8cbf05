"""Errors of the rollout engines (defined in `atgrpo.errors.runtime`, so that `atgrpo.errors` loads no torch)."""

from __future__ import annotations

from atgrpo.errors.runtime import PromptTooLongError, VllmUnavailableError

__all__ = ["PromptTooLongError", "VllmUnavailableError"]
