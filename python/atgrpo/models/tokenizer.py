"""The built-in model's tokenizers, built in code, saved and loaded like any HF tokenizer.

Two kinds (`TinyModelSpec.tokenizer`), both wrapped in `PreTrainedTokenizerFast` so `save_pretrained`
writes an ordinary folder that `AutoTokenizer.from_pretrained` reads back:

- `char`: one token per printable ASCII character plus newline, and the specials `<pad>`, `<eos>`,
  `<unk>`. Built with `tokenizers` as a BPE with an empty merge list, which is exactly a character
  split.
- `program`: the same characters and specials with the same ids, then the multi-character pieces of
  `program_vocab.PROGRAM_PIECES` (Python keywords, calls, operators, indentation, the demos' names),
  so a program is several times fewer tokens. Segmentation is greedy longest-match-first, left to
  right: `tokenizers`' WordPiece with an empty continuing-subword prefix, i.e. no `##` markers.
  A BPE would not do: its merges apply by rank wherever a pair occurs, across piece boundaries, so
  its split is not the longest match and depends on the merge order.

Invariants of both (tested):
- any text encodes: a character outside the alphabet (tab, non-ASCII) is one `<unk>`, and nothing
  else is ever unknown;
- `decode(encode(t)) == t` for every text of printable ASCII and newlines (no normalizer, no
  spaces added or removed, a plain join);
- nothing is added on encode (no BOS/EOS; callers append `<eos>` to responses themselves).
"""

from __future__ import annotations

from typing import Literal

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from atgrpo.models.program_vocab import PROGRAM_PIECES

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))
TokenizerKind = Literal["char", "program"]

WORD_CHARS = 128
"""Longest word the program tokenizer's pre-tokenizer hands WordPiece. WordPiece's search grows
faster than linearly with a word's length (`tokenizers` 0.23: 24 ms for a 1,000-character word,
1.2 s for 4,000), so a line is cut into words of at most this many characters, counted from the
line's start, so that a line tokenizes the same wherever it stands in a text. Program lines are
shorter; a piece that straddles a cut is merely split."""
WORD_PATTERN = rf"\n[ -~]{{0,{WORD_CHARS - 1}}}|[ -~]{{1,{WORD_CHARS}}}|[^ -~]"
"""Words: a newline with the line it starts (so a piece may be a newline and the next line's
indentation), a run of printable ASCII (the text's first line, or the rest of a long line), and any
other character (tab, non-ASCII) on its own. A lone unknown character is then a word of its own and
maps to one `<unk>`, since WordPiece turns a whole word that holds an unknown character into one
`<unk>`."""


def _base_vocab() -> dict[str, int]:
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for ch in ALPHABET:
        vocab[ch] = len(vocab)
    return vocab


def _wrap(core: Tokenizer) -> PreTrainedTokenizerFast:
    # A plain join decodes: spaces and newlines are ordinary characters of the tokens.
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK, clean_up_tokenization_spaces=False
    )


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    # No pre-tokenizer: the whole text is one word, split into its characters.
    return _wrap(Tokenizer(models.BPE(vocab=_base_vocab(), merges=[], unk_token=UNK)))


def build_program_tokenizer() -> PreTrainedTokenizerFast:
    vocab = _base_vocab()
    for piece in PROGRAM_PIECES:
        vocab.setdefault(piece, len(vocab))
    model = models.WordPiece(
        vocab=vocab, unk_token=UNK, max_input_chars_per_word=WORD_CHARS, continuing_subword_prefix=""
    )
    core = Tokenizer(model)
    core.pre_tokenizer = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
    return _wrap(core)


def build_tokenizer(kind: TokenizerKind) -> PreTrainedTokenizerFast:
    """The tokenizer `TinyModelSpec.tokenizer` names."""
    builders = {"char": build_char_tokenizer, "program": build_program_tokenizer}
    if kind not in builders:
        raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {sorted(builders)}")
    return builders[kind]()


__all__ = [
    "ALPHABET",
    "EOS",
    "PAD",
    "UNK",
    "WORD_CHARS",
    "WORD_PATTERN",
    "TokenizerKind",
    "build_char_tokenizer",
    "build_program_tokenizer",
    "build_tokenizer",
]
