"""LoRA per role end to end: a two-role Plan-Path run on SmolLM2-135M-Instruct through `atgrpo-train`,
one adapter per role on one frozen base, with each engine.

Checked from the run's own outputs: every sample admitted; each role's engine-versus-learner
log-prob mismatch within the fp32 bound of full weights (1e-3, as `test_real_model.py`); each
weight sync an adapter's bytes, not a model's; each policy's adapter saved on its own, the two
different, and the merged export written. (That an engine falling back to the base or to the other
role's adapter is caught is shown with large adapters in `tests/engines/test_lora_*.py`: after two
small steps here the adapters are too close to zero for the mismatch alone to tell.)

Only the torch engine runs here: vLLM's CPU build with LoRA enabled is far slower than the run's
time budget on the CI machine (`tests/engines/test_lora_vllm.py` covers the vLLM engine).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from systest_util import run_train

from atgrpo.models.adapters import read_adapter
from test_real_model import MISMATCH_MAX, RUN_S, real_sets

SMOLLM2_BYTES = 134_515_008 * 4
"""SmolLM2-135M's weights in fp32: what one full weight sync sends."""


@pytest.mark.parametrize("engine", ["torch"])
def test_two_role_planpath_with_one_adapter_per_role(engine: str, smollm2: Path, tmp_path: Path) -> None:
    out = tmp_path / engine
    sets = [s for s in real_sets(out, smollm2, rollout__engine=f'"{engine}"', run__checkpoint_every=2)
            if not s.startswith("policies.shared.")]
    lora = "{r=8, alpha=16.0}"
    sets += [
        f"policies.plan.path={json.dumps(str(smollm2))}", f"policies.tool.path={json.dumps(str(smollm2))}",
        f"policies.plan.lora={lora}", f"policies.tool.lora={lora}", "policies.plan.lr=1e-3", "policies.tool.lr=1e-3",
        "role_policy={plan='plan', tool='tool'}", "warmstart.steps=0",
    ]
    run = run_train(out, sets, timeout_s=RUN_S)
    assert run.returncode == 0, run.output[-4000:]
    rows = run.train_rows()
    assert sorted(rows) == [1, 2]
    for step, row in rows.items():
        assert row["hub/rejected_total"] == 0.0, row
        for p in ("plan", "tool"):
            assert row[f"learner/{p}/logprob_mismatch"] <= MISMATCH_MAX, (step, p, row[f"learner/{p}/logprob_mismatch"])
        # every reply so far is an adapter: far below one full model's bytes each
        assert row["transport/weights_bytes"] < row["transport/weights_replies"] * SMOLLM2_BYTES / 20, row
    ck = out / "checkpoints/step_000002"
    adapters = {p: read_adapter(ck / p / "adapter")[1] for p in ("plan", "tool")}
    assert set(adapters["plan"]) == set(adapters["tool"])
    assert any(not torch.equal(adapters["plan"][k], adapters["tool"][k]) for k in adapters["plan"])
    assert (ck / "plan" / "model" / "config.json").is_file()
