"""Errors of answer verification. The base class comes from the extension (not via `atgrpo.errors`) so
that `atgrpo.errors` can re-export these without an import cycle."""

from __future__ import annotations

from atgrpo._core import AtgrpoError


class VerifierStartError(AtgrpoError):
    """A Math-Verify worker process could not start (missing package, crash on import, start timeout)."""
