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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[4] / "envs" / "planpath"
"""The shipped configs (the arms' `config` files), found from the source tree as the prompts are."""
STORED = Path(__file__).resolve().parents[4] / "docs" / "results"
"""The published tables' data (`atgrpo-bench learning report`)."""


@dataclass(frozen=True)
class Arm:
    name: str
    sets: tuple[str, ...] = ()
    """`--set` overrides of this arm (beside the suite's and the run's own)."""
    config: str | None = None
    """A config file under `envs/planpath/`; None: the built-in defaults (the demo, `train.toml`)."""
    doc: str = ""
    shared: str | None = None
    """Runs of this arm are the same runs as every other arm with this key (same config, same
    overrides): they live in `<out>/shared/<key>-<digest>/seed<s>/` and are run once for all suites."""
    policies: tuple[str, ...] = ("shared",)
    """The arm's policies; in a suite with `model_seed`, each built model's `tiny.seed` is the run's seed."""


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


SA = ('task.roles=["plan"]',)
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
                Arm("mas_prompt", ("run.steps=0",), doc="tool + plan, the warm-started model evaluated with no RL"),
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
    )
}
