"""Games and planning workflow (Sokoban, Sudoku, Plan-Path): a tool agent and a plan agent.

Per turn, agents act in `roles` order. The tool agent's answer is simulated on a scratch copy of the
state and only its outcome is shown to the plan agent; the plan agent's answer is executed on the
real state. Rollout modes (ALGORITHM.md):

- tree (default): every agent-turn samples K candidates per env, each applied to its own copy of the
  env state (slot k of the env). The best candidate (greedy: highest reward, ties to the lowest
  index) is carried on: its state is copied into all K slots, and later agents see its answer.
  Rewards, `done` and selection are all read from the very slots the candidates were applied to
  (defect 1); the group key is (env, agent, turn) with the env's own index (defect 2); the plan agent
  generates after the tool agent's choice is known and sees it (defect 3).
- parallel: K independent episodes per env (slot k is branch k), no copying between branches.
- greedy evaluation (`WorkUnit.greedy`): K = 1 with argmax decoding; no samples are kept.

With `grouping = "trajectory"`, every sample of branch k gets the branch's episode return as its
reward and the key (env, 0, 0); the hub computes one advantage per (env, branch).
The workflow owns its `EnvPool` for the duration of one `run` call.

Program mode (`task.tool_mode = "program"`, the paper's setting): the tool agent writes a Python program
(extracted as in the code workflow) that prints a move list; it runs in the sandbox with no input, and
its stdout is handed to the env's parser as the tool agent's answer (parsed, never evaluated; a
program that fails to compile or run answers nothing, an invalid action). The plan agent sees the
program, its output and the simulated outcome. The workflow then holds a sandbox until `close()`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from atgrpo.config import RunConfig
from atgrpo.engines.base import RolloutEngine, SamplingParams
from atgrpo.envs import EnvPool
from atgrpo.messages import EnvResult, Sample, WorkUnit
from atgrpo.workflows.prompts import Templates, load_templates, task_info
from atgrpo.workflows.rollout import (
    LazySandbox, answer_texts, choose_branch, encode_prompt, engine_seed, finish_unit, make_group, unit_sampling,
)

TOOL, PLAN = "tool", "plan"
TOOL_ANSWER_CHARS = 200
"""The tool answer shown to the plan agent is cut to this many characters (keeps prompts bounded)."""
PROGRAM_CHARS = 1500
"""Program mode: the part of the tool agent's program shown to the plan agent."""
PROGRAM_OUTPUT_CHARS = 4000
"""Program mode: the end of the program's stdout handed to the env's parser."""
PROGRAM_INSTRUCTION = "\nWrite a Python program (no input) that prints the answer in that format.\n"


@dataclass
class PolicyHandle:
    """What a workflow needs of one policy: an engine at a known version and its tokenizer."""

    engine: RolloutEngine
    tokenizer: object
    """A HF tokenizer (`encode`, `decode`, `eos_token_id`, optionally `apply_chat_template`)."""


@dataclass
class UnitResult:
    samples: list[Sample]
    envs: list[EnvResult]
    timings: dict[str, float] = field(default_factory=dict)


def outcome_word(success: bool, valid: bool, local: float) -> str:
    """A one-word summary of a simulated step, shown to the plan agent."""
    if success:
        return "goal"
    if not valid:
        return "invalid"
    return "closer" if local > 1e-9 else ("same" if local > -1e-9 else "farther")


class GameWorkflow:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.task = cfg.task.task
        self.roles = list(cfg.task.roles)
        self.turns = cfg.task.turns
        self.env_config = {**cfg.task.env, "max_steps": cfg.task.turns}
        self.templates: Templates = load_templates(self.task, cfg.task.prompts)
        self.use_chat_template = cfg.task.prompts == "paper"
        self.program_mode = cfg.task.tool_mode == "program"
        self.sandbox = LazySandbox(cfg)

    # -- program mode ----------------------------------------------------------------------------
    def run_tool_programs(self, texts: list[str]) -> tuple[list[str], list[str]]:
        """Run each tool answer's program; returns (stdout per program, what the plan agent is shown)."""
        from atgrpo.sandbox import stdio_program
        from atgrpo.workflows.code import compiles, extract_code

        codes = [extract_code(t) for t in texts]
        ok = [i for i, c in enumerate(codes) if compiles(c)]
        results = dict(zip(ok, self.sandbox.get().run_batch([stdio_program(codes[i], [("", None)]) for i in ok]))) if ok else {}
        outputs, shown = [], []
        for i, code in enumerate(codes):
            r = results.get(i)
            if r is None:
                out, note = "", "does not compile"
            elif r.tests[0].verdict != "passed":
                out, note = "", f"{r.tests[0].verdict}: {r.tests[0].detail}"[:TOOL_ANSWER_CHARS]
            else:
                out = r.tests[0].stdout.decode("utf-8", "replace")[-PROGRAM_OUTPUT_CHARS:]
                note = out.strip()[-TOOL_ANSWER_CHARS:] or "(no output)"
            outputs.append(out)
            shown.append(f"program:\n{code[:PROGRAM_CHARS]}\noutput: {note}")
        return outputs, shown

    def close(self) -> None:
        self.sandbox.close()

    # -- prompts ---------------------------------------------------------------------------------
    def prompt_text(self, role: str, obs: str, turn: int, tool_view: tuple[str, str] | None) -> str:
        section = ""
        if role == PLAN and tool_view is not None:
            section = self.templates.tool_view.format(tool_answer=tool_view[0], tool_result=tool_view[1])
        template = self.templates.tool if role == TOOL else self.templates.plan
        text = template.format(obs=obs, info=task_info(self.task, obs), turn=turn + 1, turns=self.turns, tool_section=section)
        return text + PROGRAM_INSTRUCTION if role == TOOL and self.program_mode else text

    def encode(self, tokenizer, text: str) -> list[int]:
        return encode_prompt(tokenizer, text, self.use_chat_template)

    # -- rollout ---------------------------------------------------------------------------------
    def run(
        self,
        unit: WorkUnit,
        policies: dict[str, PolicyHandle],
        sampling: SamplingParams,
        *,
        run_id: str = "",
        seed: int | None = None,
        on_groups: Callable[[list[Sample]], None] | None = None,
    ) -> UnitResult:
        """Roll out `unit.seeds`; `on_groups` receives each agent-turn's complete groups as they finish."""
        ro = self.cfg.rollout
        greedy = unit.greedy
        k = 1 if greedy else ro.k
        tree = ro.sampling == "tree" and not greedy
        params = unit_sampling(sampling, greedy)
        n = len(unit.seeds)
        has_tool = TOOL in self.roles
        pool = EnvPool(self.task, n * k * (2 if has_tool else 1), **self.env_config)
        timings = {"generate_s": 0.0, "env_s": 0.0}
        try:
            slots = np.arange(n * k, dtype=np.int64).reshape(n, k)
            scratch = slots + n * k
            t0 = time.perf_counter()
            pool.reset(slots.ravel(), np.repeat(np.asarray(unit.seeds, dtype=np.uint64), k), unit.split)
            timings["env_s"] += time.perf_counter() - t0
            done = np.zeros((n, k), dtype=bool)
            success = np.zeros((n, k), dtype=bool)
            returns = np.zeros((n, k), dtype=np.float64)
            turns_used = np.zeros((n, k), dtype=np.int64)
            samples: list[Sample] = []
            rng = np.random.default_rng(seed)
            call = 0
            for turn in range(self.turns):
                tool_view: dict[tuple[int, int], tuple[str, str]] = {}
                for agent, role in enumerate(self.roles):
                    live = [(e, b) for e in range(n) for b in range(k) if not done[e, b]]
                    if not live:
                        break
                    policy = self.cfg.role_policy[role]
                    handle = policies[policy]
                    t0 = time.perf_counter()
                    obs = pool.render(np.array([slots[e, b] for e, b in live]))
                    timings["env_s"] += time.perf_counter() - t0
                    prompts = [
                        self.encode(handle.tokenizer, self.prompt_text(role, o, turn, tool_view.get(eb)))
                        for o, eb in zip(obs, live)
                    ]
                    t0 = time.perf_counter()
                    call += 1
                    outs = handle.engine.generate(prompts, params, seed=engine_seed(seed, call))
                    timings["generate_s"] += time.perf_counter() - t0
                    texts = answer_texts(handle.tokenizer, outs, self.cfg.rollout.truncated_is_invalid)
                    target = scratch if role == TOOL else slots
                    t0 = time.perf_counter()
                    shown = [t.strip()[:TOOL_ANSWER_CHARS] for t in texts]
                    actions = texts
                    if role == TOOL and self.program_mode:
                        actions, shown = self.run_tool_programs(texts)
                    if role == TOOL:
                        for e, b in live:
                            pool.fork(int(slots[e, b]), [int(scratch[e, b])])
                    res = pool.step(np.array([target[e, b] for e, b in live]), actions)
                    timings["env_s"] += time.perf_counter() - t0
                    row = {eb: i for i, eb in enumerate(live)}
                    if role == TOOL:
                        for i, (e, b) in enumerate(live):
                            word = outcome_word(bool(res.success[i]), bool(res.valid[i]), float(res.reward_local[i]))
                            tool_view[(e, b)] = (shown[i], word)
                    else:
                        for i, (e, b) in enumerate(live):
                            returns[e, b] += res.reward[i]
                            turns_used[e, b] = turn + 1
                            done[e, b] = res.done[i]
                            success[e, b] = res.success[i]
                    if tree:
                        chooser = rng if ro.selection == "random" else None
                        self._select(pool, slots, live, row, res.reward, chooser, role, tool_view, done, success, returns, turns_used)
                    if greedy:
                        continue
                    group = make_group(
                        unit, run_id=run_id, policy=policy, version=handle.engine.version, role=role, agent=agent,
                        turn=turn, live=live, prompts=prompts, outs=outs, rewards=res.reward, teams=res.reward_team,
                        locals_=res.reward_local, successes=res.success,
                    )
                    samples.extend(group)
                    # Trajectory grouping rewrites rewards once the episodes end, so it streams at the end.
                    if on_groups is not None and ro.grouping != "trajectory":
                        on_groups(group)
            envs = finish_unit(
                unit, self.cfg, samples, returns=returns, success=success, turns_used=turns_used,
                one_per_env=tree or greedy, on_groups=on_groups,
            )
            return UnitResult(samples=samples, envs=envs, timings=timings)
        finally:
            pool.close()

    @staticmethod
    def _select(pool, slots, live, row, rewards, chooser, role, tool_view, done, success, returns, turns_used) -> None:
        """Carry the chosen candidate of each env on into all of its K slots (tree sampling).

        `chooser` None is greedy selection; a numpy Generator picks uniformly (the ablation).
        """
        k = slots.shape[1]
        envs = sorted({e for e, _ in live})
        for e in envs:
            cand = [b for b in range(k) if (e, b) in row]
            best = choose_branch(cand, [rewards[row[(e, b)]] for b in cand], chooser)
            others = [int(slots[e, b]) for b in range(k) if b != best]
            if role == TOOL:
                for b in range(k):
                    tool_view[(e, b)] = tool_view[(e, best)]
                continue
            if others:
                pool.fork(int(slots[e, best]), others)
            done[e, :] = done[e, best]
            success[e, :] = success[e, best]
            returns[e, :] = returns[e, best]
            turns_used[e, :] = turns_used[e, best]
