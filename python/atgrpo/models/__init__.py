"""Local model folders: the built-in tiny Qwen3 with its character tokenizer, and loading any HF folder."""

from atgrpo.models.folder import load_model, load_tokenizer
from atgrpo.models.tiny import TinyModelSpec, build_tiny_model
from atgrpo.models.tokenizer import build_char_tokenizer

__all__ = ["TinyModelSpec", "build_char_tokenizer", "build_tiny_model", "load_model", "load_tokenizer"]
