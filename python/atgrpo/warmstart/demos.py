"""Solver demonstrations for the supervised warm start: (prompt ids, response ids) pairs per role.

States are drawn from training seeds in a range of their own (`DEMO_SEED_BASE` + i, never used by
the RL data cursor) and diversified by a few random moves, so the warm-started model has seen
mid-episode positions. Targets are the solver's optimal answer in the template style. The tool
answer shown to the plan agent is corrupted in a `tool_noise` fraction of demos (with the outcome
the simulation really gives), so the plan agent learns to check the tool instead of copying it.
Prompts are the workflow's own (`GameWorkflow.prompt_text`), so demos and rollouts agree on them.

Program mode (`task.tool_mode = "program"`): the tool agent's demos are programs, each by a
strategy drawn from `program_mix` (mostly flawed ones, which play the part `tool_noise` plays in
answer mode, so `tool_noise` is not used). What the plan agent is shown of a tool answer, and the
action simulated, come from `GameWorkflow.actions`, the rollouts' own path: in program mode each
program really runs in the workflow's sandbox (`run_printing_programs`, nothing given to it) and
the plan agent's prompt holds its real output and the simulation's outcome. The plan agent's target
is the solver's answer, except in program mode when the program printed an answer the env parses
(whether or not it reaches the goal): then it is that output, copied. The warm start teaches the
plan agent to act on what ran, and RL, from the simulated outcome it is shown, when not to. Two
targets that were tried and failed (trials 6 and 7, docs/learning.md): the solver's answer always,
which taught distrust even of winning programs; and a copy only of winning outputs, the solver's
answer otherwise, under which the plan agent learned to undo the most frequent demo's flaw (the
solver's path is the swapped-move program's output with U and D exchanged) and so, once RL had
made the tool's programs right, broke their right answers.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from atgrpo.envs import EnvPool
from atgrpo.warmstart.program_mix import mix_programs
from atgrpo.workflows.games import PLAN, TOOL, GameWorkflow
from atgrpo.workflows.states import Simulation
from atgrpo.workflows.tool_programs import answer_parsed

DEMO_SEED_BASE = 1 << 40
MOVES = "UDLR"


def random_moves(rng: np.random.Generator, lo: int, hi: int) -> str:
    return "[" + ",".join(rng.choice(list(MOVES), size=int(rng.integers(lo, hi + 1)))) + "]"


def first_moves(plan: str, limit: int) -> str:
    """The first `limit` moves of a solver plan `#### [U, R, R]`: what one answer may hold. A plan that
    is not a move list (a Sudoku grid) is returned whole."""
    head, bracket, body = plan.partition("[")
    if not bracket:
        return plan
    moves = [m.strip() for m in body.rstrip("] \n").split(",") if m.strip()]
    return head + "[" + ", ".join(moves[:limit]) + "]"


def make_demos(
    wf: GameWorkflow,
    tokenizer,
    count: int,
    *,
    start: int,
    tool_noise: float,
    seed: int,
    roles: Collection[str] | None = None,
) -> list[tuple[list[int], list[int]]]:
    """`count` envs' worth of demos (one per role each), from demo seeds `start .. start + count`.

    `roles`: whose demos to return (default: every role of `wf`). The demos are always made with all
    of `wf.roles` acting, so a plan agent's prompt shows the tool agent's answer whenever the
    workflow has a tool agent, as it does in rollouts, even when only the plan demos are returned.
    """
    keep = set(wf.roles if roles is None else roles)
    rng = np.random.default_rng([seed, start])
    n = count
    pool = EnvPool(wf.task, 2 * n, **wf.env_config)
    try:
        ids = np.arange(n)
        pool.reset(ids, DEMO_SEED_BASE + start + ids, "train")
        turns = np.zeros(n, dtype=np.int64)
        # Half the demos start mid-episode: one to three random moves first (as one answer, or one
        # answer per move when an answer may hold fewer moves), never using up the turn limit.
        limit = wf.env_config.get("max_moves")  # cuts move lists only (see first_moves)
        per_answer = 256 if limit is None else int(limit)
        warm = ids[rng.random(n) < 0.5]
        if len(warm) and wf.turns > 1:
            moves_each = rng.integers(1, 4, size=len(warm))  # drawn always: keeps the demo stream fixed
            rounds = 1 if per_answer >= 3 else min(3, wf.turns - 1)
            for r in range(rounds):
                todo = warm[moves_each > r] if rounds > 1 else warm
                if len(todo):
                    pool.step(todo, [random_moves(rng, 1, 1 if rounds > 1 else 3) for _ in todo])
                    turns[todo] += 1
        live = ~pool.status(ids).done
        ids = ids[live]
        obs = pool.render(ids)
        plans = [p if limit is None or p is None else first_moves(p, per_answer) for p in pool.solve(ids).plans]
        eos = [tokenizer.eos_token_id]
        out = []
        if wf.program_mode:
            # Programs print the answer in the format the prompt asks for, the plan target's format.
            compact = wf.templates.style != "paper"
            targets = answers = mix_programs(wf.task, obs, rng, compact=compact) if TOOL in wf.roles else []
        else:
            targets, answers = _noisy_answers(wf, plans, rng, tool_noise, per_answer)
        for i, e in enumerate(ids if TOOL in wf.roles and TOOL in keep else []):
            prompt = wf.prompt_text(TOOL, obs[i], int(turns[e]), None)
            out.append(
                (wf.encode(tokenizer, prompt, TOOL), tokenizer.encode(targets[i], add_special_tokens=False) + eos)
            )
        views: list[Simulation | None] = [None] * len(ids)
        plan_targets = [wf.templates.answer_text(p or "") for p in plans]
        if TOOL in wf.roles and len(ids):
            actions, shown, _ = wf.actions(TOOL, answers)
            for e in ids:
                pool.fork(int(e), [int(e) + n])
            sim = pool.step(ids + n, actions)
            views = [
                Simulation(
                    int(turns[e]), shown[i], bool(sim.success[i]), bool(sim.valid[i]), float(sim.reward_local[i])
                )
                for i, e in enumerate(ids)
            ]
            if wf.program_mode:
                plan_targets = [
                    wf.templates.answer_text(actions[i].strip())
                    if answer_parsed(wf.task, wf.env_config, actions[i], bool(sim.valid[i]))
                    else t
                    for i, t in enumerate(plan_targets)
                ]
        for i, e in enumerate(ids if PLAN in keep else []):
            answer = plan_targets[i]
            prompt = wf.prompt_text(PLAN, obs[i], int(turns[e]), views[i])
            out.append((wf.encode(tokenizer, prompt, PLAN), tokenizer.encode(answer, add_special_tokens=False) + eos))
        return out
    finally:
        pool.close()


def _noisy_answers(
    wf: GameWorkflow, plans: list[str | None], rng: np.random.Generator, tool_noise: float, per_answer: int
) -> tuple[list[str], list[str]]:
    """Answer mode: each tool demo's target (the solver's answer) and the answer the plan agent is
    shown, a few random moves instead in a `tool_noise` share of demos. No draw without a tool agent."""
    targets, shown = [], []
    for plan in plans:
        answer = wf.templates.answer_text(plan or "")
        noisy = TOOL in wf.roles and rng.random() < tool_noise
        noise = random_moves(rng, 1, min(6, per_answer)) if noisy else ""
        targets.append(answer)
        shown.append(wf.templates.answer_text(noise) if noisy else answer)
    return targets, shown
