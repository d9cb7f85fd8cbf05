"""What each of a game tool agent's programs did (program mode), counted into `ToolPrograms`, the
source of the `rollout/tool/*` and `eval/tool/*` metrics.

Invariants:
- Every answer falls in exactly one outcome (`OUTCOMES`), decided from its program's run alone and
  from what the env made of its printed answer; `alone_success` is counted only for `RAN` answers.
- "Parses" is the env's own grammar: an answer the env found valid parsed; for one it did not (an
  illegal move, or nothing parseable) the reference parser of `atgrpo.envs.reference` decides, which
  mirrors the Rust parser rule for rule (tested for equivalence there). Only printed text is parsed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from atgrpo.envs.reference.common import split_config
from atgrpo.envs.reference.parse import as_utf8, parse_moves
from atgrpo.envs.reference.sudoku import SudokuRefConfig, parse_answer
from atgrpo.messages import ToolPrograms
from atgrpo.sandbox import Verdict
from atgrpo.workflows.programs import PrintedOutput

RAN, UNPARSEABLE, TIMED_OUT, CRASHED, NO_COMPILE = "ran", "unparseable", "timed_out", "crashed", "no_compile"
OUTCOMES = (RAN, UNPARSEABLE, TIMED_OUT, CRASHED, NO_COMPILE)
"""The names of the `ToolPrograms` count each outcome adds to."""


def printed_answer_parses(task: str, env_config: dict[str, Any], text: str) -> bool:
    """The env's parser accepts `text` as an answer of `task` (legal moves or not)."""
    own, common = split_config(env_config)
    data = as_utf8(text)
    if task == "sudoku":
        return parse_answer(data, int(own.get("size", SudokuRefConfig.size)), common.max_moves) is not None
    return parse_moves(data, common.max_moves) is not None


def answer_parsed(task: str, env_config: dict[str, Any], text: str, valid: bool) -> bool:
    """The env parsed `text`: a valid answer did; for one it found invalid (an illegal move, or
    nothing parseable) the reference parser decides (`printed_answer_parses`)."""
    return bool(valid) or printed_answer_parses(task, env_config, text)


def program_outcome(run: PrintedOutput, parsed: bool) -> str:
    """One of `OUTCOMES` for a program's run, `parsed` telling whether the env parsed what it printed."""
    if run.verdict is None:
        return NO_COMPILE
    if run.verdict == Verdict.TIMEOUT:
        return TIMED_OUT
    if not run.ran:
        return CRASHED
    return RAN if parsed else UNPARSEABLE


def count_programs(
    runs: Sequence[PrintedOutput],
    printed: Sequence[str],
    valid: Sequence[bool],
    success: Sequence[bool],
    *,
    task: str,
    env_config: dict[str, Any],
) -> ToolPrograms:
    """The counts of one batch of tool answers: `runs[i]` printed `printed[i]`, which the env's
    simulation found `valid[i]` and `success[i]`."""
    counts = dict.fromkeys(OUTCOMES, 0)
    alone = 0
    for run, text, ok, solved in zip(runs, printed, valid, success, strict=True):
        outcome = program_outcome(run, answer_parsed(task, env_config, text, ok))
        counts[outcome] += 1
        alone += int(outcome == RAN and bool(solved))
    return ToolPrograms(answers=len(runs), alone_success=alone, **counts)


__all__ = ["OUTCOMES", "answer_parsed", "count_programs", "printed_answer_parses", "program_outcome"]
