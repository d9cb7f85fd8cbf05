"""Engine settings an actor cannot run are refused when the config is read, with the reason
(`atgrpo.config.engines`): vLLM's sleep mode serves one engine per process on a GPU."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from atgrpo.config import load_config
from atgrpo.config.engines import VLLM_SLEEP_ONE_ENGINE, engines_per_actor

SLEEP_ON_GPU = [
    "rollout.engine='vllm'",
    "rollout.device='cuda'",
    "rollout.vllm_sleep_when_idle=true",
    "warmstart.steps=0",
]
TWO = ["role_policy={plan='a', tool='b'}", "policies.a.lr=1e-4", "policies.b.lr=1e-4"]


def test_engines_per_actor_counts_full_policies_and_lora_groups():
    assert engines_per_actor(load_config(None, ["warmstart.steps=0"])) == 1
    assert engines_per_actor(load_config(None, [*TWO, "warmstart.steps=0"])) == 2
    shared_base = load_config(None, [*TWO, "warmstart.steps=0", "policies.a.lora={r=8}", "policies.b.lora={r=8}"])
    assert engines_per_actor(shared_base) == 1  # one engine serves both adapters


def test_two_sleeping_vllm_engines_in_one_actor_are_refused_with_the_reason():
    with pytest.raises(ValidationError) as info:
        load_config(None, [*SLEEP_ON_GPU, *TWO])
    text = str(info.value)
    assert (
        "2 vLLM engines per actor" in text and "CuMem allocator can only be used for one instance per process" in text
    )
    assert VLLM_SLEEP_ONE_ENGINE.split(":")[0] in text
    # A full policy beside a LoRA group is two engines as well.
    with pytest.raises(ValidationError, match="2 vLLM engines per actor"):
        load_config(None, [*SLEEP_ON_GPU, *TWO, "policies.a.lora={r=8}"])


@pytest.mark.parametrize(
    "sets",
    [
        SLEEP_ON_GPU,  # one policy: one engine
        [*SLEEP_ON_GPU, *TWO, "policies.a.lora={r=8}", "policies.b.lora={r=8}"],  # one LoRA group
        [*SLEEP_ON_GPU[:2], *TWO, "warmstart.steps=0"],  # no sleep mode
        [
            "rollout.engine='vllm'",
            "rollout.vllm_sleep_when_idle=true",
            *TWO,
            "warmstart.steps=0",
        ],  # CPU: sleep is ignored
    ],
)
def test_what_one_process_can_run_is_accepted(sets):
    load_config(None, sets)
