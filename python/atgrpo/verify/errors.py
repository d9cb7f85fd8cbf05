"""Errors of answer verification (defined in the leaf module `atgrpo.errors.runtime`, so that
`atgrpo.errors` loads no verifier)."""

from __future__ import annotations

from atgrpo.errors.runtime import VerifierStartError

__all__ = ["VerifierStartError"]
