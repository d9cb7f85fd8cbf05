"""A rollout engine that answers from a script instead of a model (for workflow tests)."""

from __future__ import annotations

from typing import Callable

from atgrpo.engines.base import Completion, RolloutEngine, SamplingParams
from atgrpo.models.tokenizer import build_char_tokenizer


class ScriptedEngine(RolloutEngine):
    """`answer(prompt_text, index_within_call)` gives each completion's text; every call is recorded.
    An answer ending in `CUT` comes back without it and without a stop token, as one cut off at
    `max_new_tokens` does."""

    CUT = "<cut>"

    def __init__(self, answer: Callable[[str, int], str], policy: str = "shared") -> None:
        self.answer = answer
        self.policy = policy
        self.version = 0
        self.tokenizer = build_char_tokenizer()
        self.calls: list[tuple[list[str], list[str]]] = []
        self.params: list[SamplingParams] = []
        """The sampling parameters of each call, in call order."""

    def generate(self, prompts, params: SamplingParams, seed=None):
        texts = [self.tokenizer.decode(p) for p in prompts]
        answers = [self.answer(t, i) for i, t in enumerate(texts)]
        self.calls.append((texts, answers))
        self.params.append(params)
        out = []
        for a in answers:
            cut = a.endswith(self.CUT)
            ids = self.tokenizer.encode(a.removesuffix(self.CUT), add_special_tokens=False)
            ids += [] if cut else [self.tokenizer.eos_token_id]
            out.append(Completion(ids, [-0.5] * len(ids), not cut))
        return out

    def load_weights(self, version, tensors):
        self.version = version


def run_scripted(wf, answer, seeds, offset: int = 0, greedy: bool = False):
    """One training (or greedy) unit of `wf` on `seeds` with a `ScriptedEngine(answer)` as the shared
    policy; closes the workflow. Returns (UnitResult, engine)."""
    from atgrpo.messages import WorkUnit
    from atgrpo.workflows.base import PolicyHandle

    eng = ScriptedEngine(answer)
    unit = WorkUnit(0, 0, list(seeds), offset, "train", {"shared": 0}, greedy=greedy)
    try:
        result = wf.run(
            unit, {"shared": PolicyHandle(eng, eng.tokenizer)}, SamplingParams(max_new_tokens=8), run_id="t"
        )
    finally:
        wf.close()
    return result, eng


def grouped_advantages(samples, grouping: str):
    """(advantages [n], group stats, number of groups) of `samples` as the learner computes them."""
    from atgrpo.learner.advantages import step_advantages

    adv = step_advantages(samples, grouping)
    return adv.values, adv.stats, adv.num_groups
