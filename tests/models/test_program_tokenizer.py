"""The program tokenizer (`atgrpo.models.tokenizer.build_program_tokenizer`): it encodes any text,
decodes back exactly, splits by greedy longest match, saves and loads like the character tokenizer,
and shrinks the warm-start programs several-fold. The spec field `TinyModelSpec.tokenizer` picks it."""

from __future__ import annotations

import re
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from atgrpo.config import TinyModelSpec
from atgrpo.envs import EnvPool
from atgrpo.models.program_vocab import PROGRAM_PIECES
from atgrpo.models.tiny import build_tiny_model
from atgrpo.models.tokenizer import (
    ALPHABET,
    UNK,
    WORD_PATTERN,
    build_char_tokenizer,
    build_program_tokenizer,
    build_tokenizer,
)
from atgrpo.warmstart.program_demos import strategies, strategy_program

DEMO_PLANPATH = {"width": 6, "height": 6, "obstacle_ratio": 0.25, "min_distance": 3, "stop_at_goal": False}
"""The CPU demo's Plan-Path (envs/planpath/train.toml)."""
LEVEL_CELLS = set(".#AG123456789 ")
"""What a level's rows are made of (Plan-Path cells, Sudoku digits and the spaces between them)."""

PROGRAM = build_program_tokenizer()
CHAR = build_char_tokenizer()
TEXTS = st.text(alphabet=ALPHABET, max_size=400)
PIECE_TEXTS = st.lists(st.sampled_from([*PROGRAM_PIECES, *ALPHABET]), max_size=120).map("".join)
"""Texts made of pieces and characters, so long matches, and pieces next to pieces, are common."""


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def greedy_longest_match(text: str) -> list[str]:
    """The reference split: words as `WORD_PATTERN` cuts them, then each word left to right, taking the
    longest piece or character that starts there."""
    vocab = set(PROGRAM_PIECES) | set(ALPHABET)
    longest = max(map(len, vocab))
    out = []
    for word in re.findall(WORD_PATTERN, text):
        i = 0
        while i < len(word):
            n = next(n for n in range(min(longest, len(word) - i), 0, -1) if word[i : i + n] in vocab)
            out.append(word[i : i + n])
            i += n
    return out


@settings(max_examples=150, deadline=None)
@given(st.one_of(TEXTS, PIECE_TEXTS))
def test_decode_undoes_encode(text: str) -> None:
    for tokenizer in (PROGRAM, CHAR):
        assert tokenizer.decode(ids(tokenizer, text)) == text
        assert tokenizer.decode(ids(tokenizer, text), skip_special_tokens=True) == text


@settings(max_examples=150, deadline=None)
@given(st.one_of(TEXTS, PIECE_TEXTS))
def test_split_is_greedy_longest_match(text: str) -> None:
    assert PROGRAM.convert_ids_to_tokens(ids(PROGRAM, text)) == greedy_longest_match(text)


def test_unknown_characters_are_one_unk_each_and_never_fail() -> None:
    text = "def f():\n\treturn 'é' + \"日本\"\n"
    tokens = PROGRAM.convert_ids_to_tokens(ids(PROGRAM, text))
    assert tokens.count(UNK) == 4  # the tab, é, 日, 本
    assert PROGRAM.decode(ids(PROGRAM, text), skip_special_tokens=True) == text.translate(
        {ord(c): None for c in "\té日本"}
    )


def test_characters_keep_the_character_tokenizers_ids() -> None:
    assert {t: i for t, i in PROGRAM.get_vocab().items() if i < len(CHAR)} == CHAR.get_vocab()
    assert len(PROGRAM) == len(CHAR) + len(PROGRAM_PIECES)
    assert ids(PROGRAM, "def ") != ids(CHAR, "def ")


def test_pieces_keep_their_invariants() -> None:
    assert len(set(PROGRAM_PIECES)) == len(PROGRAM_PIECES)
    for piece in PROGRAM_PIECES:
        assert len(piece) >= 2 and "\n" not in piece[1:], repr(piece)
        assert all(c in ALPHABET for c in piece), repr(piece)
        assert not set(piece) <= LEVEL_CELLS or piece.strip() == "", repr(piece)  # indentation is no cell


def test_save_and_load_round_trip(tmp_path) -> None:
    PROGRAM.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = 'for r, c in queue:\n        print("#### [" + ", ".join(m))\n'
    assert loaded.get_vocab() == PROGRAM.get_vocab()
    assert ids(loaded, text) == ids(PROGRAM, text)
    assert loaded.decode(ids(loaded, text)) == text
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.unk_token_id) == (0, 1, 2)


def demo_programs(n: int) -> dict[tuple[str, str], list[str]]:
    """Every strategy's programs on the first `n` train levels: Plan-Path 6x6 (the demo's) and Sudoku 4x4."""
    seeds = np.arange(n)
    pools = {"planpath": EnvPool("planpath", n, **DEMO_PLANPATH), "sudoku": EnvPool("sudoku", n, size=4)}
    out = {}
    for task, pool in pools.items():
        obs = pool.reset(seeds, seeds, "train").obs
        for s in strategies(task):
            out[task, s] = [strategy_program(task, o, s) for o in obs]
    return out


def test_demo_programs_shrink_several_fold() -> None:
    # Measured on 100 levels: 2.6x (Sudoku greedy) to 3.3x (Sudoku rows_only), under 230 tokens each.
    for (task, strategy), texts in demo_programs(20).items():
        chars = statistics.mean(len(ids(CHAR, t)) for t in texts)
        pieces = [len(ids(PROGRAM, t)) for t in texts]
        assert chars / statistics.mean(pieces) >= 2.3, (task, strategy)
        assert max(pieces) <= 256, (task, strategy)
        assert all(PROGRAM.decode(ids(PROGRAM, t)) == t for t in texts)


@pytest.mark.parametrize("kind", ["char", "program"])
def test_spec_field_picks_the_tokenizer(tmp_path, kind: str) -> None:
    spec = TinyModelSpec(
        hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, num_kv_heads=1, tokenizer=kind
    )
    folder = build_tiny_model(spec, tmp_path / kind)
    loaded = AutoTokenizer.from_pretrained(folder)
    assert loaded.get_vocab() == build_tokenizer(kind).get_vocab()
    assert '"vocab_size": %d' % len(loaded) in (folder / "config.json").read_text()


def test_spec_defaults_to_the_character_tokenizer() -> None:
    assert TinyModelSpec().tokenizer == "char"
    with pytest.raises(ValueError):
        TinyModelSpec(tokenizer="bpe")
    with pytest.raises(ValueError):
        build_tokenizer("bpe")  # type: ignore[arg-type]
