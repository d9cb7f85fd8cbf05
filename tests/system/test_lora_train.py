"""LoRA per role end to end on SmolLM2-135M-Instruct through `atgrpo-train`, one adapter per role on
one frozen base: Plan-Path (plan, tool) with vLLM (one engine, both adapters), and the code workflow
(coder, tester; programs in the sandbox) with the torch engine. (Plan-Path on the torch engine adds
no path the two do not take; it was dropped to keep CI short.)

Checked from the run's own outputs: every sample admitted; each role's engine-versus-learner
log-prob mismatch within the fp32 bound of full weights (1e-3, as `test_real_model.py`); each
weight sync an adapter's bytes, not a model's; each policy's adapter saved on its own, the two
different, and the merged export written. (That an engine falling back to the base or to the other
role's adapter is caught is shown with large adapters in `tests/engines/test_lora_*.py`: after two
small steps here the adapters are too close to zero for the mismatch alone to tell.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from systest_util import run_train
from test_real_model import MISMATCH_MAX, RUN_S, real_sets

from atgrpo.models.adapters import read_adapter

pytestmark = pytest.mark.integration

SMOLLM2_BYTES = 134_515_008 * 4
"""SmolLM2-135M's weights in fp32: what one full weight sync sends."""


ROLES = {"planpath": ("plan", "tool"), "code": ("coder", "tester")}
CASES = [("code", "torch"), ("planpath", "vllm")]


@pytest.mark.parametrize(("task", "engine"), CASES, ids=[f"{t}-{e}" for t, e in CASES])
def test_two_roles_with_one_adapter_per_role(task: str, engine: str, smollm2: Path, tmp_path: Path) -> None:
    out = tmp_path / engine
    sets = [
        s
        for s in real_sets(out, smollm2, rollout__engine=f'"{engine}"', run__checkpoint_every=2)
        if not s.startswith("policies.shared.")
    ]
    lora = "{r=8, alpha=16.0}"
    roles = ROLES[task]
    for p in roles:
        sets += [f"policies.{p}.path={json.dumps(str(smollm2))}", f"policies.{p}.lora={lora}", f"policies.{p}.lr=1e-3"]
    sets += ["role_policy={" + ", ".join(f"{p}='{p}'" for p in roles) + "}", "warmstart.steps=0", f'task.task="{task}"']
    if task == "code":
        sets += ["rollout.truncated_is_invalid=false", "rollout.max_new_tokens=48"]
    run = run_train(out, sets, timeout_s=RUN_S if engine == "torch" else 2 * RUN_S)
    assert run.returncode == 0, run.output[-4000:]
    rows = run.train_rows()
    assert sorted(rows) == [1, 2]
    for step, row in rows.items():
        assert row["hub/rejected_total"] == 0.0, row
        for p in roles:
            assert row[f"learner/{p}/logprob_mismatch"] <= MISMATCH_MAX, (step, p, row[f"learner/{p}/logprob_mismatch"])
        # every reply so far is an adapter: far below one full model's bytes each
        assert row["transport/weights_bytes"] < row["transport/weights_replies"] * SMOLLM2_BYTES / 20, row
    ck = out / "checkpoints/step_000002"
    adapters = {p: read_adapter(ck / p / "adapter")[1] for p in roles}
    one, two = (adapters[p] for p in roles)
    assert set(one) == set(two) and any(not torch.equal(one[k], two[k]) for k in one)
    assert (ck / roles[0] / "model" / "config.json").is_file()
