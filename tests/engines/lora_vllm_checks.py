"""The vLLM LoRA engine on the real model, in one child process (see test_lora_engines.py).

python lora_vllm_checks.py MODEL_DIR OUT_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import time  # noqa: E402

from lora_cases import adapter, gaps, reference_models, two_role_config  # noqa: E402

from atgrpo.engines.base import SamplingParams  # noqa: E402
from atgrpo.engines.lora import open_adapter_engines  # noqa: E402
from atgrpo.workflows.prompts import encode_prompt  # noqa: E402

GREEDY = SamplingParams(max_new_tokens=16, greedy=True)


def main(model_dir: str, out_path: str) -> None:
    torch.set_num_threads(2)
    folder = Path(model_dir)
    cfg = two_role_config(folder, "vllm")
    opened = open_adapter_engines(cfg, ["a", "b"], folder, "float32")
    engines = {p: e for p, (e, _) in opened.items()}
    tok = opened["a"][1]
    pad = tok.pad_token_id
    prompts = [encode_prompt(tok, q, chat=True) for q in ("Name three colours of the rainbow.", "What is 12 + 30?")]
    print("engine started", flush=True)
    res: dict = {"engines": len({id(e.shared) for e in engines.values()}), "gaps": {}}
    first: dict[str, list[list[int]]] = {}
    for version in (1, 2):
        tensors = {p: adapter(cfg, folder, p, seed=10 * version + i, scale=0.05) for i, p in enumerate("ab")}
        t0 = time.perf_counter()
        for p in "ab":
            engines[p].load_weights(version, tensors[p])
        res.setdefault("load_s", []).append(time.perf_counter() - t0)
        models = reference_models(cfg, folder, tensors)
        found = {}
        for p in ("a", "b", "a"):  # switching back and forth: each call is one role's batch
            t0 = time.perf_counter()
            comps = engines[p].generate(prompts, GREEDY)
            res.setdefault("generate_s", []).append(time.perf_counter() - t0)
            found[p] = gaps(models, p, prompts, comps, pad)
            if version == 1:
                first[p] = [c.token_ids for c in comps]
            else:
                res["v2_changed_outputs"] = res.get("v2_changed_outputs", True) and first[p] != [
                    c.token_ids for c in comps
                ]
        res["gaps"][str(version)] = found
    Path(out_path).write_text(json.dumps(res))
    print(json.dumps(res))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
