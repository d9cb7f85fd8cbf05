"""`atgrpo-eval --adapter [ROLE=]PATH`: a peft adapter merged into a role's model before evaluation."""

from __future__ import annotations

import pytest
import torch

from atgrpo.cli.eval import build_parser, eval_config
from atgrpo.config import LoraSection, TinyModelSpec, load_config
from atgrpo.errors import EvalError
from atgrpo.models.adapters import write_adapter
from atgrpo.models.folder import load_model
from atgrpo.models.peft_models import AdapterWeights, attach_adapters
from atgrpo.models.tiny import build_tiny_model


def test_adapter_is_merged_into_its_roles_model(tmp_path):
    base = build_tiny_model(
        TinyModelSpec(hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1), tmp_path / "m"
    )
    cfg = load_config(None, ["warmstart.steps=0", f"policies.shared.path='{base}'", "policies.shared.lora={r=4}"])
    peft_model = attach_adapters(load_model(base), cfg, ["shared"])
    weights = AdapterWeights(peft_model, "shared")
    gen = torch.Generator().manual_seed(0)
    weights.load_state_dict({k: torch.randn(v.shape, generator=gen) * 0.2 for k, v in weights.state_dict().items()})
    write_adapter(tmp_path / "adapter", cfg.policies["shared"].lora or LoraSection(), weights.state_dict(), base)

    args = build_parser().parse_args(
        ["--task", "planpath", "--model", str(base), "--adapter", f"plan={tmp_path / 'adapter'}"]
    )
    _, folders = eval_config(args)
    assert folders["tool"] == str(base) and folders["plan"] != str(base)
    ids = torch.tensor([[4, 8, 15, 16, 23, 42]])
    with torch.no_grad():
        want = peft_model.eval()(input_ids=ids).logits
        got = load_model(folders["plan"]).eval()(input_ids=ids).logits
        plain = load_model(base).eval()(input_ids=ids).logits
    assert (want - plain).abs().max() > 100 * (want - got).abs().max()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    every = build_parser().parse_args(
        ["--task", "planpath", "--model", str(base), "--adapter", str(tmp_path / "adapter")]
    )
    _, folders = eval_config(every)
    assert folders["tool"] == folders["plan"] != str(base)  # one merge for both roles
    for bad in (f"judge={tmp_path / 'adapter'}", str(tmp_path)):
        with pytest.raises(EvalError, match="--adapter"):
            eval_config(build_parser().parse_args(["--task", "planpath", "--model", str(base), "--adapter", bad]))
