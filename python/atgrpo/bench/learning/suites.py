"""What each learning suite is (`atgrpo-bench learning SUITE`): its arms, its reference arm, its seeds,
its step budget and the overrides of all its runs (docs/learning.md).

Invariants:
- Data only: nothing here runs, reads or writes anything (`runs.py` turns an arm and a seed into a
  command and a folder, `runner.py` runs them).
- Step-budget suites give every arm the same `run.steps` and no time limit; wall time is reported
  beside. `staleness` is a time-budget suite (same minutes of RL, steps as many as fit).
- With `model_seed` the seed changes each built policy's `tiny.seed` as well as `run.seed`, so the
  seed fixes the initialisation the arms are paired on; a pretrained model's weights are its own.
- An arm with a `shared` key is the same run in every suite that has it (same config, same
  overrides): its runs are made once and read back by the others.
- A suite's config files and the prompt templates its runs read are one task pack's,
  `envs/<task_pack>/` (Plan-Path unless it says otherwise).
- A prompt-only arm (`run.steps=0`) trains nothing: it is the warm-started model, evaluated. With
  `start_of` it is measured on another arm's runs, whose start evaluation is that same model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ENVS = Path(__file__).resolve().parents[4] / "envs"
"""The task packs, found from the source tree as the prompts are."""
CONFIGS = ENVS / "planpath"
"""The shipped Plan-Path configs: the `config` files of every suite whose `task_pack` is planpath."""
STORED = Path(__file__).resolve().parents[4] / "docs" / "results"
"""The published tables' data (`atgrpo-bench learning report`)."""


@dataclass(frozen=True)
class Arm:
    name: str
    sets: tuple[str, ...] = ()
    """`--set` overrides of this arm (beside the suite's and the run's own)."""
    config: str | None = None
    """A config file under the suite's `envs/<task_pack>/`; None: the built-in defaults (`envs/defaults.toml`)."""
    doc: str = ""
    shared: str | None = None
    """Runs of this arm are the same runs as every other arm with this key (same config, same
    overrides): they live in `<out>/shared/<key>-<digest>/seed<s>/` and are run once for all suites."""
    policies: tuple[str, ...] = ("shared",)
    """The arm's policies; in a suite with `model_seed`, each built model's `tiny.seed` is the run's seed."""
    base_sets: tuple[str, ...] = ()
    """Overrides that go before the run's own (its seed): a whole-table replacement such as
    `policies={...}`, which would otherwise wipe the `policies.<p>.tiny.seed` set before it."""
    start_of: str | None = None
    """A prompt-only arm measured on another arm's runs: the start evaluation of that arm's run of
    the same seed (its warm-started model on the held-out levels, before any RL step) is this arm's
    whole run, so it is not made a second time. Both configs may differ in `RL_ONLY` keys alone
    (`runs.check_start_of`): the warm start and the greedy evaluation read none of them."""

    @property
    def prompt_only(self) -> bool:
        """It trains nothing (`run.steps=0`): the warm-started model, evaluated."""
        return PROMPT_ONLY[0] in self.sets


@dataclass(frozen=True)
class Suite:
    name: str
    arms: tuple[Arm, ...]
    reference: str
    """The arm the others are compared with, seed by seed."""
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int | None = 100
    """RL steps of every arm (no time limit); None: a time-budget suite or the config's own steps."""
    sets: tuple[str, ...] = ()
    """Overrides of every run of the suite."""
    model_seed: bool = True
    """The seed also changes each built policy's `tiny.seed` (False for a pretrained model)."""
    doc: str = ""
    task_pack: str = "planpath"
    """The folder under `envs/` that holds the arms' config files and the prompt templates the runs read."""
    transcripts: int = 0
    """Each run also keeps the transcripts of this many held-out episodes (`transcripts.jsonl`, greedy,
    the first levels of its evaluation), made from its final checkpoint; 0: none."""

    @property
    def configs(self) -> Path:
        return ENVS / self.task_pack

    def config_file(self, arm: Arm) -> Path | None:
        """The arm's config file; None: the built-in defaults."""
        return self.configs / arm.config if arm.config is not None else None


RL_ONLY = ("run.steps", "rollout.sampling", "rollout.grouping")
"""The keys a `start_of` arm's config may differ in from its source arm's (beside `run.out_dir`): how
many RL steps, and how RL samples and groups; the warm start and the start evaluation read none."""
PROMPT_ONLY = ("run.steps=0",)
"""The prompt-only arms' override: no RL step, so the start and end evaluations are the warm-started model."""
SA = ('task.roles=["plan"]',)
"""The paper's single agent: the planner alone, answering the level itself with no tool."""
PROGRAM = "train_program.toml"
"""Program mode's shipped config of each task pack: the tool agent writes a program, the sandbox runs
it, the planner answers from its output (issue 47)."""
GRPO = ('rollout.sampling="parallel"', 'rollout.grouping="trajectory"')
"""Plain GRPO: K parallel episodes per env, one group per env (the paper's "+GRPO" and trajectory rows)."""
ONE_POLICY_PER_ROLE = (
    # The whole table: the program config's `shared` policy would otherwise stay beside the two, and
    # each keeps the config's own policy settings (program tokenizer, 512 positions, its lr).
    "policies={"
    + ",".join(
        f'{role}={{lr=5e-5,lr_schedule="linear",tiny={{tokenizer="program",max_positions=512}}}}'
        for role in ("tool", "plan")
    )
    + "}",
)


def paper_arms(full: bool) -> tuple[Arm, ...]:
    """The paper's table in program mode, on the task pack's program config. `full` (Plan-Path): also
    trajectory groups, one policy per role and the grouping ablation's agent-only and turn-only rows;
    else the four rows Sudoku keeps, to save machine hours."""
    arms = [
        Arm(
            "sa_prompt",
            (*SA, *PROMPT_ONLY),
            PROGRAM,
            doc="the planner alone, warm-started, no RL (sa_grpo's start evaluation)",
            start_of="sa_grpo",
        ),
        Arm("sa_grpo", (*SA, *GRPO), PROGRAM, doc="the planner alone + GRPO (parallel, trajectory groups)"),
        Arm(
            "mas_prompt",
            PROMPT_ONLY,
            PROGRAM,
            doc="program-writing tool + planner, warm-started, no RL (mas_atgrpo's start evaluation)",
            start_of="mas_atgrpo",
        ),
    ]
    if full:
        arms.append(Arm("mas_trajectory", GRPO, PROGRAM, doc="tool + planner, parallel sampling, trajectory groups"))
    arms.append(Arm("mas_atgrpo", (), PROGRAM, doc="tool + planner, AT-GRPO: tree sampling, (env, agent, turn) groups"))
    if full:
        arms += [
            Arm(
                "mas_atgrpo_roles",
                ('role_policy={tool="tool",plan="plan"}',),
                PROGRAM,
                policies=("tool", "plan"),
                base_sets=ONE_POLICY_PER_ROLE,
                doc="tool + planner, one policy per role (each warm-started on its own role's demos), AT-GRPO",
            ),
            Arm("mas_agent", ('rollout.grouping="agent"',), PROGRAM, doc="AT-GRPO with agent-only groups (env, agent)"),
            Arm("mas_turn", ('rollout.grouping="turn"',), PROGRAM, doc="AT-GRPO with turn-only groups (env, turn)"),
        ]
    return tuple(arms)


PAPER_SUITES = (
    Suite(
        "paper_planpath",
        paper_arms(full=True),
        reference="mas_atgrpo",
        steps=200,
        transcripts=20,
        doc="the paper's table on program-mode Plan-Path, the CPU demo's 6x6 grid (not the paper's 10x10). "
        "Paper, Qwen3-1.7B: SA 5%, SA+GRPO 11%, MAS 10%, MAS+AT-GRPO 96%; "
        "grouping: trajectory 11, turn-only 52, agent-only 74, both 96",
    ),
    Suite(
        "paper_sudoku",
        paper_arms(full=False),
        reference="mas_atgrpo",
        steps=200,
        task_pack="sudoku",
        transcripts=20,
        doc="the paper's table on program-mode 4x4 Sudoku. Paper, Qwen3-1.7B: SA 7%, SA+GRPO 29%, "
        "MAS 69%, MAS+AT-GRPO 99%",
    ),
)
"""Issue 47's suites: the paper's headline table, with the tool agent writing programs (docs/learning.md)."""

SUITES = {
    s.name: s
    for s in (
        Suite(
            "ordering",
            (
                Arm(
                    "sa_grpo",
                    (*SA, 'rollout.sampling="parallel"', 'rollout.grouping="trajectory"'),
                    doc="one role (plan), K parallel episodes, trajectory groups: single agent + GRPO",
                ),
                Arm("sa_atgrpo", SA, doc="one role (plan), tree sampling, (env, agent, turn) groups"),
                Arm("mas_prompt", PROMPT_ONLY, doc="tool + plan, the warm-started model evaluated with no RL"),
                Arm(
                    "mas_trajectory",
                    (),
                    "train_trajectory.toml",
                    doc="tool + plan, parallel sampling, trajectory groups",
                    shared="trajectory",
                ),
                Arm(
                    "mas_atgrpo",
                    (),
                    doc="tool + plan, the default: tree sampling, (env, agent, turn) groups",
                    shared="default",
                ),
                Arm(
                    "mas_atgrpo_roles",
                    ('role_policy={tool="tool",plan="plan"}',),
                    policies=("tool", "plan"),
                    doc="tool + plan, one policy per role (each warm-started on its own role's demos), AT-GRPO",
                ),
            ),
            reference="mas_atgrpo",
            doc="the paper's ordering on the default demo",
        ),
        Suite(
            "grouping",
            (
                Arm(
                    "trajectory",
                    (),
                    "train_trajectory.toml",
                    doc="one group per env, K parallel episodes",
                    shared="trajectory",
                ),
                Arm(
                    "agent",
                    ('rollout.grouping="agent"',),
                    doc="key (env, agent): all turns of one agent, tree sampling",
                ),
                Arm("turn", ('rollout.grouping="turn"',), doc="key (env, turn): all agents of one turn, tree sampling"),
                Arm("agent_turn", (), doc="key (env, agent, turn): AT-GRPO, the default", shared="default"),
            ),
            reference="agent_turn",
            doc="the paper's grouping ablation on the default demo",
        ),
        Suite(
            "alpha",
            tuple(
                Arm(
                    f"alpha{a:g}".replace(".", "_"),
                    () if a == 1.0 else (f"task.env.alpha={a}",),
                    doc=f"reward = {a:g} * team + local",
                    shared="default" if a == 1.0 else None,
                )
                for a in (0.0, 0.5, 1.0)
            ),
            reference="alpha1",
            doc="the mix of team and local reward (task.env.alpha) on the default demo",
        ),
        Suite(
            "smollm2",
            (
                Arm("smollm2", (), "train_smollm2.toml", doc="SmolLM2-135M, 4x4 Plan-Path, its own time limit"),
                Arm(
                    "smollm2_lora",
                    (),
                    "train_smollm2_lora.toml",
                    policies=("tool", "plan"),
                    doc="the same task and time limit, one LoRA adapter per role on one frozen SmolLM2 base (docs/lora.md)",
                ),
            ),
            reference="smollm2",
            seeds=(0, 1),
            steps=None,
            model_seed=False,
            doc="the real-model recipe: full fine-tuning against a LoRA adapter per role",
        ),
        Suite(
            "staleness",
            (
                Arm("k0", ("train.max_staleness=0",), doc="strict on-policy streaming"),
                Arm("k1", ("train.max_staleness=1",), doc="pipelined, samples up to one version old"),
            ),
            reference="k0",
            seeds=(0,),
            steps=None,
            doc="k=1 against k=0 at equal wall time (10 minutes of RL each)",
            # A time budget has no step horizon for the default's lr decay: the constant lr its table was made with.
            sets=(
                "run.steps=100000",
                "run.time_limit_s=600",
                "run.checkpoint_every=0",
                "policies.shared.lr=1e-4",
                'policies.shared.lr_schedule="constant"',
            ),
        ),
        Suite(
            "objective",
            (
                Arm(
                    "default",
                    (),
                    doc="the default objective: symmetric clip 0.2, token mean, GRPO advantages",
                    shared="default",
                ),
                Arm(
                    "dapo",
                    (
                        "train.clip_eps_high=0.28",
                        "rollout.drop_constant_groups=true",
                        "rollout.refill_groups=120",
                        "rollout.refill_max_envs=32",
                        "rollout.overlong_buffer=8",
                    ),
                    doc="DAPO: clip-higher 0.2/0.28, constant groups dropped and the step refilled to 120 "
                    "informative groups (at most 32 extra envs), an 8-token overlong buffer",
                ),
                Arm(
                    "dr_grpo",
                    ('train.loss_aggregation="seq_mean_token_sum"', "rollout.scale_advantages_by_std=false"),
                    doc="Dr. GRPO: no std division, a constant normaliser (samples x the response budget)",
                ),
                Arm(
                    "gspo",
                    (
                        'train.ratio_level="sequence"',
                        "train.clip_eps_low=3e-4",
                        "train.clip_eps_high=4e-4",
                        'train.loss_aggregation="seq_mean"',
                    ),
                    doc="GSPO: one length-normalised ratio per sample, clipped to [1 - 3e-4, 1 + 4e-4], sequence mean",
                ),
                Arm(
                    "pipelined_k2",
                    ("train.max_staleness=2", "train.minibatches=2", "train.streaming=false"),
                    doc="samples up to 2 versions old, 2 mini-batches: the second clipped against the proximal policy",
                ),
                Arm(
                    "pipelined_k2_mb1",
                    ("train.max_staleness=2", "train.minibatches=1", "train.streaming=false"),
                    doc="the same with one mini-batch: the proximal policy is the learner itself (no extra pass)",
                ),
            ),
            reference="default",
            steps=200,
            doc="the objective settings of issue 49 (docs/configuration.md) against the default, on the default demo",
        ),
        *PAPER_SUITES,
    )
}
