"""A character-level tokenizer built in code, saved and loaded like any HF tokenizer.

One token per printable ASCII character plus newline, and the specials `<pad>`, `<eos>`, `<unk>`.
Any other character maps to `<unk>`, so prompts never fail to encode. Built with `tokenizers` (BPE
with an empty merge list is exactly a character split) and wrapped in `PreTrainedTokenizerFast`, so
`save_pretrained` writes an ordinary folder that `AutoTokenizer.from_pretrained` reads back.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for ch in ALPHABET:
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    # No pre-tokenizer: spaces and newlines are ordinary characters, and decoding is a plain join.
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK, clean_up_tokenization_spaces=False
    )
