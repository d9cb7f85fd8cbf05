"""`atgrpo-eval` in program mode puts beside the team's accuracy what the tool agent's programs did
alone (JSON `tool`, two table rows); in answer mode neither is there. A scripted engine and sandbox
stand in for the model and the real sandbox (tests/workflows/test_tool_programs.py ties the two)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atgrpo.cli import eval as eval_cli
from atgrpo.config import TinyModelSpec, load_config
from atgrpo.engines import torch_engine
from atgrpo.models import build_tiny_model
from atgrpo.workflows import programs
from atgrpo.workflows.games import GameWorkflow
from tests.workflows.scripted import ScriptedEngine
from tests.workflows.tool_batch import GARBAGE, LOOP, NO_COMPILE, ScriptedSandbox, fence, level_answers

SPEC = TinyModelSpec(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
SEEDS = 5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(SPEC, tmp_path_factory.mktemp("models") / "tiny")


def tool_answers() -> list[str]:
    """Held-out level i's tool answer: a solving program, a legal non-solving one, a loop, garbage,
    one that does not compile."""
    env = GameWorkflow(load_config(None, [])).env_config
    (plan, _), (_, step) = level_answers(env, 0, "eval"), level_answers(env, 1, "eval")
    return [fence(c) for c in (f"print({plan!r})", f"print({step!r})", LOOP, GARBAGE, NO_COMPILE)]


def run_eval(tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *sets: str) -> dict:
    answers = tool_answers()

    def answer(text: str, i: int) -> str:
        # One unit holds every level, so index i is held-out level i.
        return answers[i] if "Write a Python program" in text else "[U]"

    monkeypatch.setattr(torch_engine, "TorchEngine", lambda model, policy, **kw: ScriptedEngine(answer, policy))
    monkeypatch.setattr(programs, "stdio_program", lambda code, cases: code)
    monkeypatch.setattr(programs.LazySandbox, "get", lambda self: ScriptedSandbox())
    out = tmp_path / "res.json"
    argv = ["--task", "planpath", "--model", str(tiny), "--seeds", str(SEEDS), "--turns", "1", "--out", str(out)]
    assert eval_cli.main([*argv, *(a for s in sets for a in ("--set", s))]) == 0
    return json.loads(out.read_text())


def test_program_mode_reports_tool_alone_success_beside_accuracy(tiny, tmp_path, monkeypatch, capsys):
    res = run_eval(tiny, tmp_path, monkeypatch, 'task.tool_mode="program"')
    tool = res["tool"]
    assert tool["programs"] == SEEDS  # one tool answer per level: greedy, one turn
    assert tool["program_ran"] == pytest.approx(2 / SEEDS)
    assert tool["alone_success"] == pytest.approx(1 / SEEDS)
    for name in ("timed_out", "unparseable", "no_compile"):
        assert tool[name] == pytest.approx(1 / SEEDS)
    assert tool["crashed"] == 0.0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("accuracy"))
    assert lines[at + 1].split() == ["tool", "alone", "20.0%", "of", "5", "tool", "answers", "solve", "the", "level"]
    assert lines[at + 2].startswith("tool programs") and "ran 40.0%" in lines[at + 2]


def test_answer_mode_has_no_tool_figures(tiny, tmp_path, monkeypatch, capsys):
    res = run_eval(tiny, tmp_path, monkeypatch)
    assert "tool" not in res and "accuracy" in res
    assert "tool alone" not in capsys.readouterr().out
