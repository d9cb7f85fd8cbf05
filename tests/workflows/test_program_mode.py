"""Program mode of the game tool agents: the program runs in the sandbox, its output is parsed by the
env (never evaluated) and simulated on a copy, and the plan agent sees the output and the outcome (not the program)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scripted import ScriptedEngine

from atgrpo.config import load_config
from atgrpo.engines.base import SamplingParams
from atgrpo.envs import EnvPool
from atgrpo.messages import WorkUnit
from atgrpo.workflows.base import PolicyHandle
from atgrpo.workflows.games import GameWorkflow

ENV = "task.env={width=6,height=6,obstacle_ratio=0.2,min_distance=3}"
PROGRAMS = [
    "```python\nprint('[U]')\n```",
    "```python\nmoves = ['D', 'D']\nprint('[' + ', '.join(moves) + ']')\n```",
    "```python\nwhile True:\n    pass\n```",
    "```python\nprint(\"[__import__('os').system('touch {marker}')]\")\n```",
]


def test_tool_programs_are_run_parsed_and_shown(tmp_path: Path):
    marker = tmp_path / "evaluated"
    programs = [p.replace("{marker}", str(marker)) for p in PROGRAMS]
    wf = GameWorkflow(load_config(None, [ENV, "task.tool_mode=program", "task.sandbox_timeout_s=1.0", "task.turns=1"]))

    def answer(text: str, i: int) -> str:
        return programs[i % 4] if "Write a Python program" in text else "[R]"

    eng = ScriptedEngine(answer)
    unit = WorkUnit(0, 0, [3], 0, "train", {"shared": 0})
    try:
        result = wf.run(
            unit, {"shared": PolicyHandle(eng, eng.tokenizer)}, SamplingParams(max_new_tokens=8), run_id="t"
        )
    finally:
        wf.close()
    tool = sorted((s for s in result.samples if s.role == "tool"), key=lambda s: s.branch)
    replay = EnvPool("planpath", 4, **wf.env_config)
    replay.reset(np.arange(4), [3] * 4, "train")
    expected = replay.step(np.arange(4), ["[U]", "[D, D]", "", f"[__import__('os').system('touch {marker}')]"])
    assert [s.reward for s in tool] == pytest.approx(list(expected.reward))
    assert not expected.valid[2] and not expected.valid[3]  # no output / unparseable output: invalid
    assert not marker.exists()  # the printed text was parsed, never evaluated
    plan_prompts = eng.calls[1][0]
    assert all("print(" not in p for p in plan_prompts)  # the plan agent is shown the output, not the code
    best = int(np.argmax([s.reward for s in tool]))
    printed = ["[U]", "[D, D]"][best] if best < 2 else None
    # the chosen program's output, in the compact template's fixed-width field, right before the answer
    assert printed is None or all(p.endswith(f":{printed.ljust(48, '~')}\nP:") for p in plan_prompts)


def test_answer_mode_is_unchanged_by_default():
    cfg = load_config(None, [ENV])
    assert cfg.task.tool_mode == "answer" and not GameWorkflow(cfg).program_mode
