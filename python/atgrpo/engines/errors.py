"""Errors of the rollout engines, apart from the engines so that `atgrpo.errors` loads no torch."""

from __future__ import annotations

from atgrpo._core import AtgrpoError


class PromptTooLongError(AtgrpoError, ValueError):
    """A prompt plus `max_new_tokens` exceeds the model's context length."""


class VllmUnavailableError(AtgrpoError, ImportError):
    """vLLM is not installed, or its build does not run on the requested device."""


__all__ = ["PromptTooLongError", "VllmUnavailableError"]
