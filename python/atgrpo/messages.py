"""Every record that crosses a process boundary, in one leaf module (it imports nothing of atgrpo).

Each message is a `msgspec.Struct` tagged by its `type` field, encoded as msgpack; there is no pickle anywhere
on the wire. `PROTOCOL_VERSION` travels in every `Hello`; a peer speaking another version is refused.
Tensors never go inside a struct: a `WeightsHeader` lists them and each one follows as its own raw
ZMQ frame (see `atgrpo.transport.tensors`).

Producer -> consumer is named on every class. "hub" is the learner's rank 0.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec

PROTOCOL_VERSION = 4
"""2: a weights reply is several messages (`WeightsHeader.chunk` / `chunks`); a v1 actor would take
the first chunk for the whole set, so it is refused at `Hello`. 3: `WeightsRequest.chunk` (a v2 hub
would answer a one-chunk request with the whole reply) and `UnitProgress` (a v2 hub would refuse it
and the actor would drop its unit); both refused at `Hello` instead. 4: `Welcome.run_nonce` (a v3
actor would look for the weight store's versions outside the session's folder, wait for markers
that never come and fetch every version from the hub)."""


class GroupKey(msgspec.Struct, frozen=True, array_like=True):
    """AT-GRPO group of a sample: (env, agent, turn). `env` is the env's index within its step."""

    env: int
    agent: int
    turn: int


class Sample(msgspec.Struct, array_like=True):
    """One sampled response and what it earned. Workflow (actor) -> hub -> learner.

    Token-in, token-out: the learner trains on exactly these ids and never re-tokenises.
    """

    run_id: str
    policy: str
    """Which policy sampled it (the role mapping's value for `role`)."""
    version: int
    """The policy version whose weights produced it; the hub checks it in one place."""
    step: int
    role: str
    """The agent that sampled it: its role, or `<role>_<i>` for one of several agents of a role (math
    teams, `TaskSection.agents`); `key.agent` is that agent's index."""
    key: GroupKey
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    """Behaviour log-probability of each response token, as the engine sampled it."""
    reward: float
    """alpha * reward_team + reward_local, the reward the advantage is computed from."""
    reward_team: float
    reward_local: float
    success: bool = False
    """The env was solved after this action (for metrics)."""
    truncated_response: bool = False
    """Generation hit max_new_tokens before end-of-sequence."""
    branch: int = 0
    """Which of the K branches of its env it belongs to (trajectory-level grouping dedups by it)."""


class Hello(msgspec.Struct, tag="hello"):
    """Actor -> hub, first message: who it is and which policies it can roll out."""

    protocol: int
    actor_id: str
    run_id: str
    policies: list[str]


NO_NONCE = "no-nonce"
"""The run nonce of a hub without a weight store, and of a store used outside a training run (a
benchmark, a test), where writer and readers are built together; a learner's store makes its own."""


class Welcome(msgspec.Struct, tag="welcome"):
    """Hub -> actor, answer to `Hello`: the current version of every policy."""

    run_id: str
    versions: dict[str, int]
    run_nonce: str = NO_NONCE
    """This learner session's nonce (`transport.weight_store.new_run_nonce`): the weight store's
    folder of the session and every version's marker carry it, and the actor reads only those."""


class Refused(msgspec.Struct, tag="refused"):
    """Hub -> actor: the previous message was rejected (protocol, run id, malformed...). Not fatal."""

    reason: str


class WorkRequest(msgspec.Struct, tag="work_request"):
    """Actor -> hub: give me a unit. Also the actor's heartbeat while idle."""

    actor_id: str


class WorkUnit(msgspec.Struct, tag="work_unit"):
    """Hub -> actor: roll out these envs with exactly these policy versions."""

    unit_id: int
    step: int
    seeds: list[int]
    env_offset: int
    """Global env index of `seeds[0]` within the step (group keys use it, so units never collide)."""
    split: str
    versions: dict[str, int]
    greedy: bool = False
    """Evaluation: one greedy branch, no training samples wanted."""


class NoWork(msgspec.Struct, tag="no_work"):
    """Hub -> actor: nothing to do now (step complete, weights not published); ask again later."""

    retry_after_s: float
    reason: str


class Shutdown(msgspec.Struct, tag="shutdown"):
    """Hub -> actor: the run is over; exit cleanly."""

    reason: str


class EnvResult(msgspec.Struct, array_like=True):
    """Outcome of one env of a unit. Actor -> hub (inside `SampleBatch`)."""

    env: int
    success: bool
    turns: int
    episode_return: float


_Summed = TypeVar("_Summed", "UnitTimings", "ToolPrograms")


def _field_sum(a: _Summed, b: _Summed) -> _Summed:
    """`a` and `b` (one struct type of numeric fields) added field by field: how per-unit totals sum."""
    return type(a)(*(x + y for x, y in zip(msgspec.structs.astuple(a), msgspec.structs.astuple(b))))


class UnitTimings(msgspec.Struct, array_like=True):
    """Seconds an actor spent on one unit, by activity. Workflow (generate, env) and actor (sync, idle)
    -> hub, inside the unit's `last` `SampleBatch`; the hub sums them over a step's units."""

    generate_s: float = 0.0
    """In the engines' `generate`."""
    env_s: float = 0.0
    """Stepping, rendering and forking envs, and running programs in the sandbox."""
    sync_s: float = 0.0
    """Fetching and loading the weights the unit names."""
    idle_s: float = 0.0
    """Waiting for work since the previous unit."""

    def __add__(self, other: "UnitTimings") -> "UnitTimings":
        return _field_sum(self, other)


Count = Annotated[int, msgspec.Meta(ge=0)]
"""A count an actor reports: a negative one fails decoding, so a peer's garbage never reaches the sums."""


class ToolPrograms(msgspec.Struct, array_like=True):
    """What the tool agent's programs did over a unit's tool answers (games in program mode; every
    count stays 0 elsewhere). Workflow -> hub inside the unit's `last` `SampleBatch`; the hub sums
    them over a step's units.

    Every program answer is counted once, in exactly one of `ran`, `unparseable`, `timed_out`,
    `crashed` and `no_compile` (they sum to `answers`), and `alone_success` counts a subset of
    `ran`. Counted over all candidates of a turn, before tree selection."""

    answers: Count = 0
    """Tool answers that were meant as programs."""
    ran: Count = 0
    """The program ran to the end and printed an answer the env parses."""
    alone_success: Count = 0
    """Its printed answer alone solved the level (the simulation on the scratch copy)."""
    unparseable: Count = 0
    """It ran to the end but printed nothing the env parses (garbage, or nothing)."""
    timed_out: Count = 0
    """The sandbox stopped it at its time limit."""
    crashed: Count = 0
    """It stopped with any other verdict: an exception, a memory or output limit, a sandbox error."""
    no_compile: Count = 0
    """No program that compiles (a syntax error, or an empty answer, e.g. one cut off at
    `max_new_tokens`); never run."""

    def __add__(self, other: "ToolPrograms") -> "ToolPrograms":
        return _field_sum(self, other)

    def metrics(self) -> dict[str, float]:
        """`programs` (= `answers`) and each other count as a share of it, keyed by the names the
        metrics carry under `rollout/tool/` and `eval/tool/`. Empty when no answer was a program
        (answer mode): those metrics are absent there, not zero."""
        if self.answers <= 0:
            return {}
        n = float(self.answers)
        return {
            "programs": n,
            "program_ran": self.ran / n,
            "alone_success": self.alone_success / n,
            "unparseable": self.unparseable / n,
            "timed_out": self.timed_out / n,
            "crashed": self.crashed / n,
            "no_compile": self.no_compile / n,
        }


class SampleBatch(msgspec.Struct, tag="samples"):
    """Actor -> hub: finished groups of a unit, streamed as they complete.

    The hub stages them per unit and commits them only with the `last` batch, so a unit whose actor
    dies is dropped whole and reassigned: a step never trains on half a unit.
    """

    actor_id: str
    unit_id: int
    samples: list[Sample]
    last: bool
    env_results: list[EnvResult] = []
    """With `last`: one row per env of the unit (success, return) for rollout metrics."""
    timings: UnitTimings = msgspec.field(default_factory=UnitTimings)
    """With `last`: where the unit's time went."""
    tool_programs: ToolPrograms = msgspec.field(default_factory=ToolPrograms)
    """With `last`: what the unit's tool programs did (all 0 outside program mode)."""


class SampleAck(msgspec.Struct, tag="ack"):
    """Hub -> actor: how many samples of the batch were accepted (the rest were rejected as stale)."""

    unit_id: int
    accepted: int
    rejected: int


class UnitProgress(msgspec.Struct, tag="unit_progress"):
    """Actor -> hub: still rolling out `unit_id` (one of its generate calls has just finished).
    The unit's heartbeat: it renews the lease only when the unit is leased to this connection and
    this actor; otherwise it is refused and counted (`hub/progress_refused`) and renews nothing.
    Answered by `ProgressAck`."""

    actor_id: str
    unit_id: int


class ProgressAck(msgspec.Struct, tag="progress_ack"):
    """Hub -> actor: the lease of `unit_id` runs for another `transport.unit_timeout_s` from now."""

    unit_id: int


class WeightsRequest(msgspec.Struct, tag="weights_request"):
    """Actor -> hub: send weights of `policy` at `version` (-1: the newest published)."""

    actor_id: str
    policy: str
    version: int
    chunk: int = -1
    """-1: the whole reply. Otherwise only that chunk message of it (an actor reading the weights from
    a shared store, `transport.weight_store`, fetches from the hub the chunks the store failed)."""


class TensorMeta(msgspec.Struct, array_like=True):
    """One tensor of a weights chunk; its bytes are raw frame number `frame` after the chunk's header."""

    name: str
    dtype: str
    shape: list[int]
    frame: int
    checksum: int
    """crc32 of the frame's bytes."""


class WeightsHeader(msgspec.Struct, tag="weights"):
    """Hub -> actor: one chunk of a set of weights; `len(tensors)` raw frames follow this header in
    the same ZMQ message. A weights reply is `chunks` such messages, sent in order (`chunk` 0, 1, ...),
    each with the checksums of its own tensors (see `atgrpo.transport.tensors`)."""

    policy: str
    version: int
    tensors: list[TensorMeta]
    chunk: int
    """This message's place in the reply, from 0."""
    chunks: int
    """Messages in the reply (>= 1); every chunk of a reply says the same."""


class WeightsMarker(msgspec.Struct):
    """Learner rank 0 -> actors, through a shared directory (`transport.weight_store`): the `COMPLETE`
    file of a version, written last; what a reader may expect of the version's chunk files. JSON, a
    file and never a wire message (not in `Message`)."""

    policy: str
    version: int
    chunks: int
    nbytes: int
    """Bytes of the chunk files together (padding included)."""
    run_nonce: str
    """The writing session's nonce (`Welcome.run_nonce`); a reader of another session never reads
    the version. Required: a marker without it (an older writer) does not decode, so is not read."""


Message = (
    Hello
    | Welcome
    | Refused
    | WorkRequest
    | WorkUnit
    | NoWork
    | Shutdown
    | SampleBatch
    | SampleAck
    | (UnitProgress | ProgressAck | WeightsRequest | WeightsHeader)
)


# -- learner -> launcher ----------------------------------------------------------------------------
# The learner writes these on its stdout, one JSON object per line (its logs go to stderr); the
# `atgrpo-train` launcher reads them instead of scraping log text.


class EvalSummary(msgspec.Struct, tag="evaluated"):
    """Learner -> launcher: one greedy evaluation on the held-out levels."""

    label: str
    """"start", "step N" or "end"."""
    step: int
    success: float
    """Mean success over the levels (NaN when there were none)."""
    episode_return: float
    levels: int
    wall_s: float
    tool_programs: ToolPrograms = msgspec.field(default_factory=ToolPrograms)
    """What the tool agent's programs did over the evaluation (program mode)."""

    def metrics(self) -> dict[str, float]:
        # In program mode team success comes with tool-alone success beside it (`eval/tool/*`).
        return {
            "eval/success": self.success,
            "eval/return": self.episode_return,
            "eval/levels": float(self.levels),
            "time/eval_s": self.wall_s,
            **{f"eval/tool/{k}": v for k, v in self.tool_programs.metrics().items()},
        }


class RunSummary(msgspec.Struct, tag="finished"):
    """Learner -> launcher, last event of a run; also written to `out_dir/eval.json`."""

    steps: int
    """Training steps done (over every session of a resumed run)."""
    eval_start: float | None
    """Held-out success before the first training step."""
    eval_end: float | None
    improvement_points: float | None
    """100 * (eval_end - eval_start), rounded to 0.1."""
    learning_curve: str = ""


class HubReady(msgspec.Struct, tag="hub_ready"):
    """Learner -> launcher: actors can connect to `address` now."""

    address: str


class WarmStartProgress(msgspec.Struct, tag="warm_start"):
    """Learner -> launcher: supervised warm start of `policy` before RL."""

    policy: str
    step: int
    steps: int
    loss: float


class Resumed(msgspec.Struct, tag="resumed"):
    """Learner -> launcher: continuing from `checkpoint` at `step`."""

    checkpoint: str
    step: int


class Stopping(msgspec.Struct, tag="stopping"):
    """Learner -> launcher: training stops early at `step` (signal or time limit)."""

    step: int
    reason: str


class Failed(msgspec.Struct, tag="failed"):
    """Learner -> launcher: the learner is exiting with an error (its traceback is in its log)."""

    error: str


class Notice(msgspec.Struct, tag="notice"):
    """Learner -> launcher: something the user should know about the run as it goes (`level`
    "info" or "warning"), one line of `text` with its reason (`learner.signal_watch`)."""

    level: str
    text: str


LearnerEvent = HubReady | WarmStartProgress | Resumed | EvalSummary | Stopping | Failed | RunSummary | Notice
