"""Local model folders: the built-in tiny Qwen3 with its built-in tokenizers (character, or program
pieces), and loading any HF folder."""

from atgrpo.models.folder import load_model, load_tokenizer
from atgrpo.models.tiny import TinyModelSpec, build_tiny_model
from atgrpo.models.tokenizer import build_char_tokenizer, build_program_tokenizer

__all__ = [
    "TinyModelSpec",
    "build_char_tokenizer",
    "build_program_tokenizer",
    "build_tiny_model",
    "load_model",
    "load_tokenizer",
]
