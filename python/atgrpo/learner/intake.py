"""Intake checks: is a sample something this run's actors could have produced for this unit?

The version ledger (`ledger.py`) checks the stamp; this module checks everything else a peer sends:
the shape and values of each sample (`sample_fault`), its place in its unit and group (`UnitIntake`),
and a unit's env results. Actors are not trusted: a buggy actor, a mismatched install on another host
or a hostile peer sends well-typed `SampleBatch`es, and nothing in them may reach training unless it
passes here.

Invariants:
- A fault has a reason (the `hub/rejected_<reason>` counter) and a scope. A **unit** fault is
  something an honest actor never sends (ids outside the vocabulary, a logprob list of the wrong
  length, a key outside the unit, a non-finite value, an overfull group...): the hub drops the whole
  unit, puts it back in the queue and holds it against the peer. A **group** fault is the one an
  honest actor can send, a sample longer than `train.micro_batch_tokens` (prompts grow with the
  turns): that sample's whole group is dropped, the rest of the unit is kept, and rolling the unit
  out again would only repeat it.
- Whole groups or nothing: a sample leaves with its group (group fault) or its unit (unit fault),
  and a unit commits only if every group it kept is whole (`UnitIntake.finish`), so advantages are
  never computed over half a group. The group dropped is the advantage group (`rollout.grouping`'s
  `group_of`): under agent-wise or turn-wise grouping, every turn or agent pooled with the faulty
  sample leaves with it.
- `sample_fault` needs no unit, so the orchestrator runs it again right before packing (`screen`):
  the learner never trains on, or crashes on, a sample that would fail it.
- Pure bookkeeping: no locks, no I/O. The hub calls it under its own lock.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from atgrpo.config import RunConfig
from atgrpo.learner.advantages import grouping
from atgrpo.messages import EnvResult, GroupKey, Sample, WorkUnit

LOGPROB_EPS = 1e-3
"""Largest log-probability admitted. A log-probability is <= 0, but the engines' float32 log-softmax
of a near-certain token can round a hair above 0 (~1e-7). 1e-3 leaves room for that (and for a
lower-precision engine) while a value it admits moves a PPO ratio by at most exp(1e-3) - 1 = 0.1%."""


class Fault(NamedTuple):
    reason: str
    """Counter name (`hub/rejected_<reason>`, `learner/dropped_<reason>`)."""
    detail: str
    """For the log and the peer's `Refused`: which sample or group, and what was wrong."""
    scope: Literal["unit", "group"] = "unit"


@dataclass(frozen=True)
class PolicyLimits:
    """What the learner's model of one policy can take."""

    vocab_size: int
    """Token ids the model embeds: every id, prompt included, must lie in [0, vocab_size)."""
    context_length: int | None = None
    """Prompt + response tokens the model takes; the engines refuse longer prompts (None: unknown)."""


@dataclass(frozen=True)
class IntakeLimits:
    """What every sample and unit of a run is checked against (from the config and the models)."""

    roles: tuple[str, ...]
    """The agents' names in turn order (`task.agents()`; for a team of one per role, `task.roles`):
    a sample's agent index is the position of its `role` (the agent's name) here."""
    role_policy: Mapping[str, str]
    """Agent name -> policy (`RunConfig.agent_policy()`)."""
    policies: Mapping[str, PolicyLimits]
    turns: int
    """`task.turns`: every key's turn is below it."""
    k: int
    """`rollout.k`: branches per env, so samples per tree group."""
    tree: bool
    """`rollout.sampling == "tree"`: every group has exactly K samples, one per branch."""
    trajectory: bool
    """`rollout.grouping == "trajectory"`: one group per env, key (env, 0, 0), K episodes in it."""
    max_new_tokens: int
    """`rollout.max_new_tokens`: the most response tokens of a sample whose agent has no budget of its own."""
    micro_batch_tokens: int
    """`train.micro_batch_tokens`: the packer cannot take a longer prompt + response."""
    grouping: str = "agent_turn"
    """`rollout.grouping`: which keys form one advantage group, so which samples a group fault drops."""
    agent_max_new_tokens: Mapping[str, int] = field(default_factory=dict)
    """Agent name -> most response tokens of its samples (`RunConfig.agent_max_new_tokens`); an agent
    missing here has `max_new_tokens`."""

    @classmethod
    def from_config(cls, cfg: RunConfig, policies: Mapping[str, PolicyLimits]) -> IntakeLimits:
        ro = cfg.rollout
        return cls(
            roles=tuple(a.name for a in cfg.task.agents()),
            role_policy=cfg.agent_policy(),
            policies=dict(policies),
            turns=cfg.task.turns,
            k=ro.k,
            tree=ro.sampling == "tree",
            trajectory=ro.grouping == "trajectory",
            max_new_tokens=ro.max_new_tokens,
            micro_batch_tokens=cfg.train.micro_batch_tokens,
            grouping=ro.grouping,
            agent_max_new_tokens=cfg.agent_max_new_tokens(),
        )

    def group_of(self, key: GroupKey) -> GroupKey:
        """The advantage group of a sample's key (itself under agent_turn)."""
        return grouping(self.grouping).group_of(key)

    @property
    def samples_per_env(self) -> int:
        """Most samples one env of a unit can yield: K branches, every agent, every turn."""
        return self.k * len(self.roles) * self.turns


def _where(s: Sample) -> str:
    return f"sample (env {s.key.env}, agent {s.key.agent}, turn {s.key.turn}, branch {s.branch})"


def _ids_outside(ids: Sequence[int], vocab: int) -> bool:
    return bool(ids) and (min(ids) < 0 or max(ids) >= vocab)


def sample_fault(s: Sample, limits: IntakeLimits) -> Fault | None:
    """The first thing wrong with `s` on its own (no unit needed), or None. Unit faults are checked
    before the group fault, so a sample that is both is held against its sender."""
    policy = limits.role_policy.get(s.role)
    if policy is None:
        return Fault("unknown_role", f"{_where(s)}: role {s.role[:40]!r} is not one of {list(limits.roles)}")
    if s.policy != policy or s.policy not in limits.policies:
        return Fault(
            "wrong_policy", f"{_where(s)}: role {s.role[:40]!r} is played by policy {policy!r}, not {s.policy[:40]!r}"
        )
    key = s.key
    agent_ok = (
        (key.agent, key.turn) == (0, 0)
        if limits.trajectory
        else (0 <= key.agent < len(limits.roles) and limits.roles[key.agent] == s.role)
    )
    if not agent_ok or not 0 <= key.turn < limits.turns:
        return Fault("bad_key", f"{_where(s)}: not a group of role {s.role[:40]!r} within {limits.turns} turns")
    if not 0 <= s.branch < limits.k:
        return Fault("bad_branch", f"{_where(s)}: branch outside 0..{limits.k - 1}")
    n = len(s.response_ids)
    if not s.prompt_ids:
        return Fault("empty_prompt", f"{_where(s)}: no prompt tokens")
    if n == 0:
        return Fault("empty_response", f"{_where(s)}: no response tokens")
    if len(s.logprobs) != n:
        return Fault("logprob_count", f"{_where(s)}: {len(s.logprobs)} logprobs for {n} response tokens")
    budget = limits.agent_max_new_tokens.get(s.role, limits.max_new_tokens)
    if n > budget:
        return Fault(
            "response_too_long", f"{_where(s)}: {n} response tokens > {s.role[:40]!r}'s max_new_tokens={budget}"
        )
    pol = limits.policies[s.policy]
    total = len(s.prompt_ids) + n
    if pol.context_length is not None and total > pol.context_length:
        return Fault("too_long", f"{_where(s)}: {total} tokens > the model's context of {pol.context_length}")
    if _ids_outside(s.prompt_ids, pol.vocab_size) or _ids_outside(s.response_ids, pol.vocab_size):
        return Fault(
            "out_of_vocab", f"{_where(s)}: token id outside 0..{pol.vocab_size - 1} of policy {s.policy[:40]!r}"
        )
    if not all(map(math.isfinite, s.logprobs)):
        return Fault("nonfinite_logprob", f"{_where(s)}: NaN or infinite logprob")
    if max(s.logprobs) > LOGPROB_EPS:
        return Fault("positive_logprob", f"{_where(s)}: logprob {max(s.logprobs)} > 0")
    if not all(map(math.isfinite, (s.reward, s.reward_team, s.reward_local))):
        return Fault(
            "nonfinite_reward", f"{_where(s)}: reward {s.reward}, team {s.reward_team}, local {s.reward_local}"
        )
    if total > limits.micro_batch_tokens:
        return Fault(
            "over_budget",
            f"{_where(s)}: {total} tokens > train.micro_batch_tokens={limits.micro_batch_tokens}",
            "group",
        )
    return None


class UnitIntake:
    """One leased unit's staged samples and the checks that need the unit.

    `add` stages a batch's samples (already admitted by the ledger); `finish` checks the unit is whole
    when its `last` batch comes. Either returns the faults it found; after a unit fault the caller
    drops this object with the unit. With `limits` None it checks nothing (a hub some test drives
    with hand-made samples; the learner always passes limits)."""

    def __init__(self, unit: WorkUnit, limits: IntakeLimits | None) -> None:
        self.unit = unit
        self.limits = limits
        self.samples: list[Sample] = []
        """Kept so far, in arrival order."""
        self.dropped_groups: set[GroupKey] = set()
        self.dropped_samples = 0
        """Samples left out with a dropped group (the faulty one included)."""
        self._branches: dict[GroupKey, set[int]] = {}
        self._per_episode: Counter[tuple[int, int]] = Counter()
        self._episode_reward: dict[tuple[int, int], float] = {}
        self._received = 0
        self.staged_last = 0
        """How many samples of the last `add` were staged (for the peer's ack)."""

    def add(self, samples: Sequence[Sample], received: int | None = None) -> list[Fault]:
        """Stage `samples`; `received` is how many the peer sent (the ledger may have refused some,
        but they count against the unit's bound). A unit fault stops at once (last in the list)."""
        faults: list[Fault] = []
        unit, limits = self.unit, self.limits
        self.staged_last = 0
        if limits is None:
            self.samples += samples
            self.staged_last = len(samples)
            return faults
        self._received += len(samples) if received is None else received
        if self._received and unit.greedy:
            return [Fault("greedy_samples", f"{self._received} samples for an evaluation unit, which keeps none")]
        bound = len(unit.seeds) * limits.samples_per_env
        if self._received > bound:
            return [Fault("too_many_samples", f"{self._received} samples > {bound} for {len(unit.seeds)} envs")]
        new: list[Sample] = []
        for s in samples:
            fault = sample_fault(s, limits)
            # Unit faults first, also in a group being dropped: an over-budget sample must not hide
            # one, or a peer could empty units without ever being held to account.
            unit_fault = fault if fault is not None and fault.scope == "unit" else self._unit_fault(s, limits)
            if unit_fault is not None:
                return [*faults, unit_fault]
            if fault is not None:
                faults.append(fault)
                self.dropped_groups.add(limits.group_of(s.key))
            if limits.group_of(s.key) in self.dropped_groups:
                self.dropped_samples += 1
                continue
            self._count(s)
            new.append(s)
        if faults:  # a group dropped now may have samples staged by this or earlier batches
            staged = len(self.samples) + len(new)
            self.samples = [s for s in self.samples if limits.group_of(s.key) not in self.dropped_groups]
            new = [s for s in new if limits.group_of(s.key) not in self.dropped_groups]
            self.dropped_samples += staged - len(self.samples) - len(new)
        self.samples += new
        self.staged_last = len(new)
        return faults

    def _unit_fault(self, s: Sample, limits: IntakeLimits) -> Fault | None:
        unit, key = self.unit, s.key
        if s.step != unit.step:
            return Fault("wrong_step", f"{_where(s)}: step {s.step}, the unit is of step {unit.step}")
        if s.policy not in unit.versions:
            return Fault(
                "wrong_policy",
                f"{_where(s)}: policy {s.policy[:40]!r} is not one the unit names ({sorted(unit.versions)})",
            )
        if not unit.env_offset <= key.env < unit.env_offset + len(unit.seeds):
            return Fault(
                "key_outside_unit",
                f"{_where(s)}: the unit's envs are {unit.env_offset}..{unit.env_offset + len(unit.seeds) - 1}",
            )
        branches = self._branches.get(key, set())
        if not limits.trajectory and len(branches) >= limits.k:
            return Fault("group_overfull", f"{_where(s)}: more than K={limits.k} samples in its group")
        if limits.trajectory:
            # Every sample of an episode shares the key (env, 0, 0) and the episode's return.
            episode = (key.env, s.branch)
            if self._per_episode[episode] >= len(limits.roles) * limits.turns:
                return Fault(
                    "group_overfull",
                    f"{_where(s)}: more samples than {len(limits.roles)} roles x {limits.turns} turns in one episode",
                )
            if self._episode_reward.setdefault(episode, s.reward) != s.reward:
                return Fault(
                    "reward_mismatch",
                    f"{_where(s)}: reward {s.reward}, its episode's return is {self._episode_reward[episode]}",
                )
        elif s.branch in branches:
            return Fault("duplicate_branch", f"{_where(s)}: a second sample of this branch in its group")
        return None

    def _count(self, s: Sample) -> None:
        self._branches.setdefault(s.key, set()).add(s.branch)
        self._per_episode[(s.key.env, s.branch)] += 1

    def finish(self, envs: Sequence[EnvResult]) -> Fault | None:
        """With the `last` batch: every kept group whole, and the env results those of the unit."""
        unit, limits = self.unit, self.limits
        if limits is None:
            return None
        k = limits.k
        for key, branches in self._branches.items():
            if limits.group_of(key) in self.dropped_groups:
                continue
            # Tree groups and trajectory groups hold all K branches; in parallel agent-turn grouping
            # episodes end apart, so only the first decision (agent 0, turn 0) surely has all K.
            whole = limits.tree or limits.trajectory or (key.agent, key.turn) == (0, 0)
            if whole and len(branches) != k:
                return Fault(
                    "group_incomplete", f"group {(key.env, key.agent, key.turn)}: branches {sorted(branches)} of {k}"
                )
        per_env = 1 if limits.tree or unit.greedy else k
        counts = Counter(e.env for e in envs)
        expected = {unit.env_offset + e: per_env for e in range(len(unit.seeds))}
        if counts != expected:
            return Fault(
                "env_results",
                f"env results for envs {dict(sorted(counts.items()))}, expected {per_env} for each of "
                f"{unit.env_offset}..{unit.env_offset + len(unit.seeds) - 1}",
            )
        for e in envs:
            if not math.isfinite(e.episode_return) or not 0 <= e.turns <= limits.turns:
                return Fault(
                    "env_results", f"env {e.env}: return {e.episode_return}, {e.turns} turns (at most {limits.turns})"
                )
        return None


def screen(samples: Sequence[Sample], limits: IntakeLimits) -> tuple[list[int], Counter[str]]:
    """The learner's last check before packing: indices of the samples that pass `sample_fault`,
    less every other sample of a group that lost one (a step never trains on half a group); and how
    many samples were dropped for each reason (the innocent members of such groups under
    `group_of_dropped`). Groups are advantage groups (`IntakeLimits.group_of`), as the advantages see them."""
    dropped: Counter[str] = Counter()
    bad_groups: set[GroupKey] = set()
    for s in samples:
        fault = sample_fault(s, limits)
        if fault is not None:
            dropped[fault.reason] += 1
            bad_groups.add(limits.group_of(s.key))
    keep = [i for i, s in enumerate(samples) if limits.group_of(s.key) not in bad_groups]
    siblings = len(samples) - len(keep) - sum(dropped.values())
    if siblings:
        dropped["group_of_dropped"] = siblings
    return keep, dropped


__all__ = ["LOGPROB_EPS", "Fault", "IntakeLimits", "PolicyLimits", "UnitIntake", "sample_fault", "screen"]
