"""Warm-start demos: solver answers cut to what one answer may hold, in the template's style."""

from __future__ import annotations

import pytest

from atgrpo.config import load_config
from atgrpo.envs.reference.parse import parse_moves
from atgrpo.models.tokenizer import build_char_tokenizer
from atgrpo.warmstart.demos import first_moves, make_demos
from atgrpo.workflows.games import GameWorkflow


def test_first_moves_keeps_the_solver_format() -> None:
    assert first_moves("#### [L, U, L, U]", 1) == "#### [L]"
    assert first_moves("#### [L, U, L, U]", 3) == "#### [L, U, L]"
    assert first_moves("#### [L, U]", 256) == "#### [L, U]"
    assert first_moves("####\n1234\n3412", 1) == "####\n1234\n3412"  # a grid, not a move list


@pytest.mark.parametrize("max_moves", [1, 2, None])
def test_demo_answers_never_exceed_max_moves(max_moves: int | None) -> None:
    env = "{width=6,height=6,obstacle_ratio=0.25,min_distance=3"
    env += "}" if max_moves is None else f",max_moves={max_moves}}}"
    wf = GameWorkflow(load_config(None, [f"task.env={env}", "task.turns=6"]))
    tok = build_char_tokenizer()
    demos = make_demos(wf, tok, 24, start=0, tool_noise=0.5, seed=0)
    assert len(demos) >= 24  # a tool and a plan demo per live env
    lengths = set()
    for _, response in demos:
        text = tok.decode(response, skip_special_tokens=True)
        moves = parse_moves(text.encode(), 256)
        assert moves, text
        lengths.add(len(moves))
        if max_moves is not None:
            assert len(moves) <= max_moves, text
    if max_moves is None:
        assert max(lengths) > 2  # full solver plans, not cut
