"""Program-mode warm-start demos: the tool agent's are programs of the strategy family, drawn from
the documented mix, that compile; the plan agent's prompts hold the real output of the tool's
program (run again here, in a sandbox of the test's own), never the program, and its target is the
output itself where the env parses it, else the solver's answer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

from atgrpo.config import load_config
from atgrpo.envs.reference.parse import parse_moves
from atgrpo.models.tokenizer import build_tokenizer
from atgrpo.warmstart.demos import make_demos
from atgrpo.warmstart.program_demos import CORRECT, strategies, strategy_program
from atgrpo.warmstart.program_mix import DEPTH_CAP, MIXES, draw_strategies, mix_programs
from atgrpo.workflows.games import PROGRAM_INSTRUCTION, TOOL_ANSWER_CHARS, GameWorkflow
from atgrpo.workflows.programs import LazySandbox, compiles, run_printing_programs
from atgrpo.workflows.tool_programs import printed_answer_parses

COUNT = 40
OUTPUT_FIELD = 48
"""The compact `program_view` template's field: `{tool_output:~<48.48}`."""
CONFIGS = {"planpath": [], "sudoku": ['task.task="sudoku"']}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[LazySandbox]:
    lazy = LazySandbox(load_config(None, []))
    yield lazy
    lazy.close()


def program_workflow(task: str, *sets: str) -> GameWorkflow:
    return GameWorkflow(load_config(None, [*CONFIGS[task], 'task.tool_mode="program"', *sets]))


def observation(task: str, prompt: str) -> str:
    """The level in a compact tool or plan prompt: its first rows (Plan-Path's end at the `A=` line)."""
    lines = prompt.split("\n")
    rows = lines[:4] if task == "sudoku" else lines[: next(i for i, ln in enumerate(lines) if ln.startswith("A="))]
    return "\n".join(rows)


def strategy_of(task: str, obs: str, program: str) -> str | None:
    """The strategy whose program, printing the compact templates' format (the configs' style), is
    `program`."""
    return next(
        (s for s in strategies(task) if strategy_program(task, obs, s, depth_cap=DEPTH_CAP, compact=True) == program),
        None,
    )


@pytest.mark.parametrize("task", sorted(CONFIGS))
def test_program_demos_are_the_familys_programs_and_the_plan_sees_their_real_output(
    task: str, sandbox: LazySandbox
) -> None:
    wf = program_workflow(task)
    tok = build_tokenizer("program")
    try:
        demos = make_demos(wf, tok, COUNT, start=0, tool_noise=0.5, seed=0)
    finally:
        wf.close()
    text = [(tok.decode(p), tok.decode(r, skip_special_tokens=True)) for p, r in demos]
    live = len(text) // 2
    tools, plans = text[:live], text[live:]
    assert live >= COUNT // 2 and len(plans) == live
    programs, drawn = [], []
    for prompt, program in tools:
        assert prompt.endswith(PROGRAM_INSTRUCTION)
        strategy = strategy_of(task, observation(task, prompt), program)
        assert strategy in MIXES[task] and compiles(program), program
        programs.append(program)
        drawn.append(strategy)
    assert len(set(drawn)) > 1 and CORRECT[task] in drawn  # a mix, the correct strategy among them

    runs = run_printing_programs(sandbox, programs)
    for (prompt, answer), tool_prompt, program, strategy, run in zip(plans, tools, programs, drawn, runs):
        assert run.ran
        assert observation(task, prompt) == observation(task, tool_prompt[0])
        assert program.strip() not in prompt, prompt  # the plan agent acts on the output, not the code
        output = run.text.strip()
        frame = output[-TOOL_ANSWER_CHARS:][:OUTPUT_FIELD].ljust(OUTPUT_FIELD, "~")
        assert f":{frame}\nP:" in prompt, prompt  # the compact templates' fixed-width field
        if strategy == CORRECT[task]:
            assert "\nTgoal:" in prompt  # the correct program's output reaches the goal
        if printed_answer_parses(task, wf.env_config, output):  # whatever parses, winning or not, is copied
            assert answer == wf.templates.answer_text(output)
        else:  # nothing usable printed: the solver's answer
            assert answer != wf.templates.answer_text(output)
        if task == "planpath":
            assert parse_moves(answer.encode(), 256), answer  # the target is a move list, not a program


def test_a_single_agent_gets_no_program_in_program_mode() -> None:
    wf = program_workflow("planpath", 'task.roles=["plan"]')
    tok = build_tokenizer("program")
    try:
        demos = make_demos(wf, tok, 4, start=0, tool_noise=0.5, seed=0)
    finally:
        wf.close()
    assert demos and wf.sandbox._sandbox is None  # nothing ran
    for prompt, answer in demos:
        assert "program:" not in tok.decode(prompt) and parse_moves(
            tok.decode(answer, skip_special_tokens=True).encode(), 256
        )


@pytest.mark.parametrize("task", sorted(MIXES))
def test_the_mix_is_mostly_flawed_and_drawn_as_documented(task: str) -> None:
    mix = MIXES[task]
    assert set(mix) <= set(strategies(task)) and sum(mix.values()) == pytest.approx(1.0)
    assert mix[CORRECT[task]] < 0.5 and max(mix, key=mix.__getitem__) != CORRECT[task]
    counts = Counter(draw_strategies(task, 20_000, np.random.default_rng(0)))
    assert {s: counts[s] / 20_000 for s in mix} == pytest.approx(mix, abs=0.015)
    obs = "A...\n..#.\n...G" if task == "planpath" else ". 2 . 1\n3 1 . .\n. . . .\n. . 2 3"
    same_draws = mix_programs(task, [obs] * 3, np.random.default_rng(5))
    assert same_draws == mix_programs(task, [obs] * 3, np.random.default_rng(5))
