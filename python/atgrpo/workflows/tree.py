"""The one turn loop of every workflow: AT-GRPO's tree sampling (python/atgrpo/ALGORITHM.md, "One
training step").

For each turn, for each agent in order (`task.agents()`: each role's instances; a team of one per
role is its roles), over the branches still live:
prompts -> generate (K candidates per env) -> apply each candidate to its own branch -> rewards ->
one group of samples keyed (env, agent, turn) -> tree selection. The loop holds the bookkeeping
(`Branches`: done, success, return, turns per env and branch); a workflow supplies the states
(`UnitStates`: a pool-backed game state or immutable Python states, see `states.py`).

Invariants:
- The states a candidate is applied to are the ones its prompt came from, and rewards, `done` and
  selection are read from them: there is no second copy of a branch.
- Group keys use the env's own index, `unit.env_offset + e`: K different envs never share a group,
  and the agent's own index in `task.agents()`: two instances of one role never share a group.
  Samples carry the agent's name as their `role` and the policy `cfg.agent_policy()` gives it.
- States are addressed by agent name (`UnitStates.prompt_texts(name, ...)`); for a team of one per
  role the names are the roles, so workflows that know no teams see what they always saw.
- Roles act in turn order and each generates only after the previous role's choice has been carried
  into every branch, so the next role sees the chosen answer and its K candidates differ.
- Tree mode (the default): after each role, the best candidate of each env (highest reward, ties to
  the lowest branch; `selection = "random"` draws uniformly from `np.random.default_rng(seed)`, envs
  in ascending order) is carried into all K branches. Parallel mode: K independent episodes, no
  carrying. Greedy units (evaluation): K = 1, argmax decoding, no samples kept.
- An agent that `rollout.max_new_tokens_per_role` gives a budget of its own (by name or role,
  `config.budgets`) generates with it; every other agent with the caller's `sampling.max_new_tokens`.
- Generate call c (counted from 1 over the whole unit) gets seed `engine_seed(seed, c)`; after each
  call `on_progress` (the actor's heartbeat to the hub) is called, before the env step.
- A role whose step is simulated (`Outcomes.episode` false: the games' tool agent) earns rewards for
  its samples but leaves returns, turns, `done` and success to the roles that act on the episode.
- What the candidates' programs did (`Outcomes.tool_programs`) is summed over the unit's every
  candidate, greedy units included, before selection: `UnitResult.tool_programs`.
- Trajectory grouping: once the unit ends, every sample of branch k gets the branch's return and
  the key (env, 0, 0), and the samples stream then (their rewards were not final before).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from atgrpo.config import RunConfig
from atgrpo.config.budgets import budget_overrides
from atgrpo.engines.base import Completion, SamplingParams
from atgrpo.messages import EnvResult, GroupKey, Sample, ToolPrograms, UnitTimings, WorkUnit
from atgrpo.workflows.base import GroupSink, PolicyHandle, ProgressSink, UnitResult
from atgrpo.workflows.prompts import encode_prompt

Live = list[tuple[int, int]]
"""The (env, branch) pairs a role acts on, envs ascending, then branches ascending."""
StepSink = Callable[[WorkUnit, str, int, Live, list[str], "UnitStates"], None]


@dataclass(frozen=True)
class Outcomes:
    """What one role's candidates did, row i being `live[i]`."""

    reward: npt.NDArray[np.floating]
    """The sample's reward, alpha * team + local."""
    team: npt.NDArray[np.floating]
    local: npt.NDArray[np.floating]
    done: npt.NDArray[np.bool_]
    success: npt.NDArray[np.bool_]
    episode: bool = True
    """The step acted on the episode (returns, turns, done and success follow it); false for a
    simulated step whose outcome only informs later roles."""
    tool_programs: ToolPrograms | None = None
    """What the candidates' programs did, when they were programs (games' tool agent in program mode)."""


class UnitStates(Protocol):
    """One unit's branch states: K per env. Owned by the loop for one `run`; `close` releases them."""

    def prompt_texts(self, role: str, live: Live, turn: int) -> list[str]: ...

    def apply(self, role: str, live: Live, turn: int, texts: list[str]) -> Outcomes:
        """Apply `texts[i]` to branch `live[i]`. Never raises for anything the model wrote."""
        ...

    def carry(self, role: str, env: int, best: int) -> None:
        """Copy what `role`'s step changed in branch `best` of `env` into all of the env's branches."""
        ...

    def close(self) -> None: ...


@dataclass
class Branches:
    """Episode bookkeeping per env and branch, arrays of shape [n, K]."""

    done: npt.NDArray[np.bool_]
    success: npt.NDArray[np.bool_]
    returns: npt.NDArray[np.float64]
    turns_used: npt.NDArray[np.int64]

    @classmethod
    def start(cls, n: int, k: int) -> "Branches":
        return cls(
            np.zeros((n, k), dtype=bool),
            np.zeros((n, k), dtype=bool),
            np.zeros((n, k), dtype=np.float64),
            np.zeros((n, k), dtype=np.int64),
        )

    def live(self) -> Live:
        return [(int(e), int(b)) for e, b in zip(*np.nonzero(~self.done))]

    def record(self, live: Live, turn: int, out: Outcomes) -> None:
        e, b = np.asarray(live, dtype=np.int64).T
        self.returns[e, b] += out.reward
        self.turns_used[e, b] = turn + 1
        self.done[e, b] = out.done
        self.success[e, b] = out.success

    def carry(self, env: int, best: int) -> None:
        for column in (self.done, self.success, self.returns, self.turns_used):
            column[env, :] = column[env, best]


def select(
    live: Live, rewards: Sequence[float] | np.ndarray, chooser: np.random.Generator | None
) -> list[tuple[int, int]]:
    """Tree selection: (env, chosen branch) for each env of `live`, envs ascending. Greedy (`chooser`
    None): the highest reward, ties to the lowest branch; else a uniform draw per env (the ablation)."""
    candidates: dict[int, tuple[list[int], list[float]]] = {}
    for (e, b), r in zip(live, rewards):
        branches, rs = candidates.setdefault(e, ([], []))
        branches.append(b)
        rs.append(r)
    chosen = []
    for e, (branches, rs) in candidates.items():
        i = (
            int(chooser.integers(len(branches)))
            if chooser is not None
            else int(np.argmax(np.asarray(rs, dtype=np.float64)))
        )
        chosen.append((e, branches[i]))
    return chosen


def unit_sampling(sampling: SamplingParams, greedy: bool) -> SamplingParams:
    """`sampling` as a unit uses it: argmax decoding for greedy (evaluation) units."""
    return SamplingParams(
        max_new_tokens=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        greedy=greedy or sampling.greedy,
        stop_token_ids=sampling.stop_token_ids,
    )


def agent_sampling(params: SamplingParams, budget: int | None) -> SamplingParams:
    """`params` with an agent's own response budget (`RunConfig.agent_max_new_tokens`), if it has one."""
    return params if budget is None else replace(params, max_new_tokens=budget)


def engine_seed(seed: int | None, call: int) -> int | None:
    """The seed of a unit's `call`-th generate call: samples depend on (unit seed, call) only."""
    return None if seed is None else (seed * 1000 + call) % (2**63)


def answer_texts(tokenizer, outs: Sequence[Completion], truncated_is_invalid: bool) -> list[str]:
    """The text each completion answers. With `truncated_is_invalid`, a completion cut off at
    `max_new_tokens` (no stop token) answers nothing, "", which every task scores as unparseable."""
    return [
        "" if truncated_is_invalid and not c.finished else tokenizer.decode(c.token_ids, skip_special_tokens=True)
        for c in outs
    ]


def make_group(
    unit: WorkUnit,
    *,
    run_id: str,
    policy: str,
    version: int,
    role: str,
    agent: int,
    turn: int,
    live: Live,
    prompts: Sequence[list[int]],
    outs: Sequence[Completion],
    out: Outcomes,
) -> list[Sample]:
    """One agent-turn's samples, item i being candidate `live[i]` = (env, branch), keyed (env, agent, turn)."""
    return [
        Sample(
            run_id=run_id,
            policy=policy,
            version=version,
            step=unit.step,
            role=role,
            key=GroupKey(unit.env_offset + e, agent, turn),
            prompt_ids=prompts[i],
            response_ids=outs[i].token_ids,
            logprobs=outs[i].logprobs,
            reward=float(out.reward[i]),
            reward_team=float(out.team[i]),
            reward_local=float(out.local[i]),
            success=bool(out.success[i]),
            truncated_response=not outs[i].finished,
            branch=b,
        )
        for i, (e, b) in enumerate(live)
    ]


def regroup_trajectories(unit: WorkUnit, samples: list[Sample], returns: npt.NDArray[np.float64]) -> None:
    """Trajectory grouping: each sample of branch k gets its branch's episode return, key (env, 0, 0)."""
    for s in samples:
        s.reward = float(returns[s.key.env - unit.env_offset, s.branch])
        s.key = GroupKey(s.key.env, 0, 0)


def env_results(unit: WorkUnit, branches: Branches, one_per_env: bool) -> list[EnvResult]:
    """One result per env and branch; branch 0 only when `one_per_env` (tree sampling, greedy units),
    where every branch holds the chosen one."""
    n, k = branches.returns.shape
    return [
        EnvResult(
            unit.env_offset + e,
            bool(branches.success[e, b]),
            int(branches.turns_used[e, b]),
            float(branches.returns[e, b]),
        )
        for e in range(n)
        for b in (range(1) if one_per_env else range(k))
    ]


class TreeWorkflow:
    """Base of every workflow: the turn loop (`run`). Subclasses give the unit's states (`open`)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.roles: list[str] = list(cfg.task.roles or ())
        self.agents = cfg.task.agents()
        self.agent_names = [a.name for a in self.agents]
        self.agent_policy = cfg.agent_policy()
        self.on_step: StepSink | None = None
        """Called after every agent's step with (unit, agent, turn, live, answer texts, states), before
        tree selection (`atgrpo-eval --transcripts`); None in training."""
        self.turns = cfg.task.turns
        self.budgets = budget_overrides(cfg)
        """Agent name -> its own response budget, for the agents that have one."""
        self.use_chat_template = cfg.task.prompts == "paper"

    def open(self, unit: WorkUnit, k: int) -> UnitStates:
        """The K branch states of each env of `unit`, at the start of its episodes."""
        raise NotImplementedError

    def encode(self, tokenizer, text: str, agent: str) -> list[int]:
        """`text` as `agent`'s prompt ids: in its policy's chat template (`task.prompts = "paper"`),
        with that policy's thinking switch (`policies.<p>.thinking`)."""
        policy = self.agent_policy.get(agent) or self.cfg.role_policy[agent]
        return encode_prompt(tokenizer, text, self.use_chat_template, self.cfg.policies[policy].thinking)

    def close(self) -> None:
        """Release what is held between units (nothing here)."""

    def run(
        self,
        unit: WorkUnit,
        policies: dict[str, PolicyHandle],
        sampling: SamplingParams,
        *,
        run_id: str = "",
        seed: int | None = None,
        on_groups: GroupSink | None = None,
        on_progress: ProgressSink | None = None,
    ) -> UnitResult:
        """Roll out `unit.seeds`; `on_groups` receives each agent-turn's complete groups as they
        finish; `on_progress` is called after every generate call."""
        ro = self.cfg.rollout
        greedy = unit.greedy
        k = 1 if greedy else ro.k
        tree = ro.sampling == "tree" and not greedy
        chooser = np.random.default_rng(seed) if tree and ro.selection == "random" else None
        params = unit_sampling(sampling, greedy)
        timings = UnitTimings()
        programs = ToolPrograms()
        t0 = time.perf_counter()
        states = self.open(unit, k)
        timings.env_s += time.perf_counter() - t0
        try:
            branches = Branches.start(len(unit.seeds), k)
            samples: list[Sample] = []
            call = 0
            for turn in range(self.turns):
                for agent, role in enumerate(self.agent_names):
                    live = branches.live()
                    if not live:
                        break
                    policy = self.agent_policy[role]
                    handle = policies[policy]
                    t0 = time.perf_counter()
                    texts = states.prompt_texts(role, live, turn)
                    timings.env_s += time.perf_counter() - t0
                    prompts = [self.encode(handle.tokenizer, t, role) for t in texts]
                    t0 = time.perf_counter()
                    call += 1
                    role_params = agent_sampling(params, self.budgets.get(role))
                    outs = handle.engine.generate(prompts, role_params, seed=engine_seed(seed, call))
                    timings.generate_s += time.perf_counter() - t0
                    if on_progress is not None:
                        on_progress()
                    answers = answer_texts(handle.tokenizer, outs, ro.truncated_is_invalid)
                    t0 = time.perf_counter()
                    out = states.apply(role, live, turn, answers)
                    if self.on_step is not None:
                        self.on_step(unit, role, turn, live, answers, states)
                    if out.episode:
                        branches.record(live, turn, out)
                    if out.tool_programs is not None:
                        programs = programs + out.tool_programs
                    if tree:
                        for env, best in select(live, out.reward, chooser):
                            # After a simulated step this copies equal values: carrying keeps an env's
                            # branches equal in tree mode, and only `states` changed.
                            branches.carry(env, best)
                            states.carry(role, env, best)
                    timings.env_s += time.perf_counter() - t0
                    if greedy:
                        continue
                    group = make_group(
                        unit,
                        run_id=run_id,
                        policy=policy,
                        version=handle.engine.version,
                        role=role,
                        agent=agent,
                        turn=turn,
                        live=live,
                        prompts=prompts,
                        outs=outs,
                        out=out,
                    )
                    samples.extend(group)
                    if on_groups is not None and ro.grouping != "trajectory":
                        on_groups(group)
            if ro.grouping == "trajectory" and not greedy:
                regroup_trajectories(unit, samples, branches.returns)
                if on_groups is not None and samples:
                    on_groups(samples)
            return UnitResult(samples, env_results(unit, branches, one_per_env=tree or greedy), timings, programs)
        finally:
            states.close()


__all__ = [
    "Branches",
    "Live",
    "Outcomes",
    "StepSink",
    "TreeWorkflow",
    "UnitStates",
    "agent_sampling",
    "answer_texts",
    "engine_seed",
    "env_results",
    "make_group",
    "regroup_trajectories",
    "select",
    "unit_sampling",
]
