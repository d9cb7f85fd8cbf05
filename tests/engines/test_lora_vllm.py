"""The vLLM LoRA engine on its CPU build with the real model (SmolLM2-135M-Instruct): one engine,
two adapters with very different weights, each role's requests naming its own adapter. The checks
run once in a child process (lora_vllm_checks.py; vLLM's in-process engine owns process-wide state)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent

OWN_ADAPTER_BOUND = 1e-4 + 1e-3
"""A bound, not a measurement: the mean |logp| gap allowed between vLLM's CPU build serving a role's
adapter and peft with the same adapter in fp32: the torch engine's fp32 bound against peft
(`FP32_TOL` in test_lora_engines.py, 1e-4) plus 1e-3 for vLLM's own CPU kernels. The gaps to the
base model and to the other role's adapter must exceed ten times the larger of the gap and 1e-3."""


@pytest.fixture(scope="module")
def vllm_checks(smollm2, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vllm-lora") / "checks.json"
    proc = subprocess.run(
        [sys.executable, str(HERE / "lora_vllm_checks.py"), str(smollm2), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_vllm_engine_serves_each_role_its_own_adapter(vllm_checks):
    """One vLLM engine, two adapters, every request names its role's: peft's log-probs within the
    engine-versus-learner tolerance of full weights (bf16-free fp32 run), far from base and other."""
    assert vllm_checks["engines"] == 1
    for version in ("1", "2"):
        for p, gap in vllm_checks["gaps"][version].items():
            assert gap["own"] <= OWN_ADAPTER_BOUND, (version, p, gap)
            assert min(gap["other"], gap["base"]) > 10 * max(gap["own"], 1e-3), (version, p, gap)
    assert vllm_checks["v2_changed_outputs"]  # the new version is what is served, not the cached old one
