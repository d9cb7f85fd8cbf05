"""The vLLM engine on its CPU build with the real model (SmolLM2-135M-Instruct), every point of
`engines/vllm_engine.py`'s contract. The checks run once in a child process (vllm_checks.py);
each test reads its part of the measurements."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def checks(smollm2, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vllm") / "checks.json"
    proc = subprocess.run(
        [sys.executable, str(HERE / "vllm_checks.py"), str(smollm2), str(out)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_k_copies_of_a_prompt_differ_and_a_seed_reproduces_them(checks):
    assert checks["k_distinct"] == 4
    assert checks["same_seed_same"] and checks["other_seed_differs"]


def test_completions_end_on_the_models_stop_token_or_the_budget(checks):
    assert checks["stops"] == [2]  # SmolLM2's <|im_end|>, from its own files
    assert checks["prompt_starts_with_template"]
    assert checks["finished_end_on_stop"] and checks["lengths_match"]
    assert all(n == 24 for n in checks["unfinished_lengths"])


def test_sampled_logprobs_equal_the_learners_at_the_temperature(checks):
    mean, worst, tokens = checks["sampled_mismatch"]
    assert tokens > 50
    # fp32 on both sides; different kernels only. A wrong temperature or raw logprobs differ by > 0.1.
    assert mean <= 1e-4 and worst <= 1e-3


def test_greedy_logprobs_are_the_temperature_one_distributions(checks):
    mean, worst, _ = checks["greedy_mismatch"]
    assert mean <= 1e-4 and worst <= 1e-3
    assert all(checks["greedy_is_argmax"])


def test_nucleus_logprobs_are_renormalised_not_the_full_distributions(checks):
    assert checks["nucleus_gap_min"] >= -1e-4  # never below the full distribution's
    assert checks["nucleus_gap_max"] > 1e-2  # and above it where the nucleus was cut


def test_reload_changes_a_prefix_cached_prompt_and_restores_it_exactly(checks):
    assert checks["long_prompt_tokens"] > 64  # several KV blocks, cached before the reload
    assert checks["perturbed_changes_output"]
    mean, worst, _ = checks["perturbed_mismatch"]  # the new weights, no stale KV
    assert mean <= 1e-4 and worst <= 1e-3
    old_mean, _, _ = checks["perturbed_vs_old_mismatch"]  # and not the old ones
    assert old_mean > 1e-2  # ten times the 1e-3 bound the system holds engines to
    assert checks["restored_exactly"]
    assert checks["version"] == 9


def test_two_engines_in_one_process_keep_their_own_weights(checks):
    assert checks["two_engines_a_unchanged"] and checks["two_engines_b_is_perturbed"]


def test_the_callers_torch_threads_stay_under_its_control(checks):
    assert checks["threads_restored"]
