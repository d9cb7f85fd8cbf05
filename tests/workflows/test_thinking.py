"""`policies.<p>.thinking` is passed to the chat template as `enable_thinking` (Qwen3's switch),
default off; None leaves the template's own default. The tokenizer here carries a small Jinja chat
template that reads `enable_thinking` the way Qwen3's does (an empty think block when it is false)."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from atgrpo.config import PREDATED_POLICY_KEYS, RESOLVED_HEADER, dump_config, load_config
from atgrpo.workflows.prompts import encode_prompt
from atgrpo.workflows.tree import TreeWorkflow

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


@pytest.fixture
def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {ch: i for i, ch in enumerate(sorted(set("abcdefghijklmnopqrstuvwxyz<>|_/\n !.")))}
    tok = Tokenizer(models.WordLevel({**vocab, "[UNK]": len(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()  # one character a token: decode joins them back without spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="!")
    fast.chat_template = TEMPLATE
    return fast


def _rendered(tokenizer, thinking) -> str:
    return tokenizer.decode(encode_prompt(tokenizer, "go", chat=True, thinking=thinking))


def test_the_switch_reaches_the_template(tokenizer):
    assert "<think>\n\n</think>" in _rendered(tokenizer, False)
    assert "<think>" not in _rendered(tokenizer, True)
    assert "<think>" not in _rendered(tokenizer, None)  # nothing passed: the template's default (on)


def test_the_workflow_renders_each_agent_with_its_policys_setting(tokenizer, tmp_path):
    base = [f"run.out_dir={str(tmp_path)!r}", "task.prompts='paper'", "warmstart.steps=0"]
    default = TreeWorkflow(load_config(None, base))
    assert load_config(None, base).policies["shared"].thinking is False  # the paper's runs: off
    assert "<think>\n\n</think>" in tokenizer.decode(default.encode(tokenizer, "go", "plan"))
    two = TreeWorkflow(
        load_config(None, [*base, "role_policy={plan='a', tool='b'}", "policies.a.thinking=true", "policies.b.lr=1e-4"])
    )
    assert "<think>" not in tokenizer.decode(two.encode(tokenizer, "go", "plan"))
    assert "<think>\n\n</think>" in tokenizer.decode(two.encode(tokenizer, "go", "tool"))


def test_a_resolved_config_from_before_the_setting_keeps_the_templates_default():
    assert PREDATED_POLICY_KEYS["thinking"] is None
    text = dump_config(load_config(None, ["policies.shared.thinking=false"]))
    assert text.startswith(f"# {RESOLVED_HEADER}") and "thinking = false" in text
    older = "\n".join(line for line in text.splitlines() if not line.startswith("thinking"))
    assert load_config_text(older).policies["shared"].thinking is None
    assert load_config_text(text).policies["shared"].thinking is False


def load_config_text(text: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.toml"
        path.write_text(text)
        return load_config(path)
