"""`atgrpo-bench learning` (`atgrpo.bench.learning`): the statistics on known values, the report's
arithmetic on hand-made runs, every suite's arms as valid configs, and two arms x two seeds of tiny
`atgrpo-train` runs end to end, then read back on a second call without rerunning anything."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from atgrpo.bench import cli as bench_cli
from atgrpo.bench.learning import cli, runner, runs, suites
from atgrpo.bench.learning.report import equal_wall_time, report
from atgrpo.bench.learning.stats import late_mean, paired, summarize, value_at, verdict
from atgrpo.config import load_config
from atgrpo.errors import LearningSuiteError

REL = 1e-12
"""float64 sums and one square root of values below 10: rounding is ~1e-15 relative."""


def test_summarize_known_values() -> None:
    s = summarize([1.0, 2.0, 6.0])  # mean 3, squares 4 + 1 + 9 = 14, sd sqrt(14 / 2)
    assert (s.n, s.min, s.max) == (3, 1.0, 6.0)
    assert s.mean == pytest.approx(3.0, rel=REL) and s.sd == pytest.approx(math.sqrt(7.0), rel=REL)
    one = summarize([0.25])
    assert one.mean == 0.25 and math.isnan(one.sd)  # one seed is never certain
    with pytest.raises(ValueError):
        summarize([])


def test_paired_differences_and_the_separation_rule() -> None:
    ref = {0: 0.3, 1: 0.4, 2: 0.5}
    # diffs 0.2, 0.3, 0.1: mean 0.2, sd 0.1; 2 sd / sqrt 3 = 0.115 < 0.2 -> separate. Seed 9 is not paired.
    p = paired({0: 0.5, 1: 0.7, 2: 0.6, 9: 1.0}, ref)
    assert p is not None and p.seeds == (0, 1, 2)
    assert p.mean == pytest.approx(0.2, rel=1e-9) and p.sd == pytest.approx(0.1, rel=1e-9) and p.separated
    # diffs 0.2, -0.1, 0.05: mean 0.05, sd 0.15; 2 sd / sqrt 3 = 0.173 > 0.05 -> do not separate.
    q = paired({0: 0.5, 1: 0.3, 2: 0.55}, ref)
    assert q is not None and q.mean == pytest.approx(0.05, rel=1e-9) and q.sd == pytest.approx(0.15, rel=1e-9)
    assert not q.separated and verdict(q) == "do not separate"
    assert verdict(paired({0: 0.9}, ref)) == "one seed: cannot tell"
    assert paired({5: 0.1}, ref) is None
    # Equal differences: sd 0, any nonzero mean separates.
    assert paired({0: 0.4, 1: 0.5}, {0: 0.3, 1: 0.4}).separated  # type: ignore[union-attr]


def test_value_at_takes_the_last_evaluation_reached() -> None:
    curve = [(0, 0.0, 0.1), (20, 1.5, 0.3), (40, 3.0, 0.2)]
    assert [value_at(curve, m) for m in (0.0, 1.4, 1.5, 2.9, 10.0)] == [0.1, 0.1, 0.3, 0.3, 0.2]
    assert math.isnan(value_at([], 1.0))


def test_late_mean_averages_the_last_evaluations_after_the_start() -> None:
    curve = [(0, 0.0, 0.9), (20, 1.0, 0.1), (40, 2.0, 0.2), (60, 3.0, 0.4), (80, 4.0, 0.6)]
    assert late_mean(curve) == pytest.approx((0.2 + 0.4 + 0.6) / 3, rel=REL)
    assert late_mean(curve[:3]) == pytest.approx(0.15, rel=REL)  # two evaluations after the start: both
    assert late_mean(curve[:1]) == 0.9  # no RL step (prompt-only): the start evaluation
    assert late_mean(curve, n=1) == 0.6 and math.isnan(late_mean([]))


def test_a_resumed_runs_curve_counts_each_step_once_and_not_the_stop() -> None:
    ev = lambda step, t, succ, dur: {"step": step, "time": t, "eval/success": succ, "time/eval_s": dur}  # noqa: E731
    tr = lambda step, t, dur: {"step": step, "time": t, "time/step_s": dur}  # noqa: E731
    # Session 1: eval, steps 1-3 (eval after 2), cut after step 3; session 2, an hour later, resumes
    # from step 2's checkpoint: step 3 again (its row replaces session 1's), then the last eval.
    rows = [
        ev(0, 0.0, 0.1, 9.0),
        tr(1, 60.0, 60.0),
        tr(2, 120.0, 60.0),
        ev(2, 150.0, 0.2, 30.0),
        tr(3, 210.0, 60.0),
        tr(3, 3900.0, 120.0),
        ev(3, 3930.0, 0.4, 30.0),
    ]
    assert runner.held_out_curve(rows) == [(0, 0.0, 0.1), (2, 2.5, 0.2), (3, 5.0, 0.4)]
    assert runner.held_out_curve([ev(0, 5.0, 0.3, 9.0)]) == [(0, 0.0, 0.3)]  # prompt-only: the start alone


def test_runs_compute_on_the_pinned_instruction_set_unless_the_caller_picks_one() -> None:
    env = runner.run_env({"OMP_NUM_THREADS": "1", "PATH": "/bin"})
    assert env == {"PATH": "/bin", **runner.CPU_ISA_PIN}  # threads are the run's own choice
    env = runner.run_env({"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"})
    assert env["ATEN_CPU_CAPABILITY"] == "avx512" and env["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE"
    assert env["MKL_ENABLE_INSTRUCTIONS"] == runner.CPU_ISA_PIN["MKL_ENABLE_INSTRUCTIONS"]


def _run(start: float, end: float, steps: int, minutes: float) -> runner.RunResult:
    return runner.RunResult(
        start,
        end,
        steps,
        60.0 * (minutes + 1),
        [(0, 0.0, start), (steps, minutes, end)] if steps else [(0, 0.0, start)],
    )


def test_report_arithmetic(tmp_path: Path) -> None:
    results = {
        "ref": {0: _run(0.1, 0.5, 10, 4.0), 1: _run(0.2, 0.6, 10, 6.0)},
        "fast": {0: _run(0.1, 0.2, 10, 2.0), 1: _run(0.2, 0.4, 10, 2.0)},
        "prompt": {0: _run(0.1, 0.1, 0, 0.0), 1: _run(0.2, 0.2, 0, 0.0)},
    }
    out = report("demo", "ref", results, tmp_path)
    ref = out["arms"]["ref"]
    assert ref["final"]["mean"] == pytest.approx(0.55, rel=REL) and ref["final"]["sd"] == pytest.approx(
        math.sqrt(0.005), rel=1e-9
    )
    assert ref["gain"]["mean"] == pytest.approx(0.4, rel=REL) and ref["gain"]["sd"] == pytest.approx(0.0, abs=1e-15)
    assert ref["wall_min"]["mean"] == pytest.approx(6.0, rel=REL)
    fast = out["paired"]["fast"]["final"]  # diffs -0.3, -0.2
    assert fast["diffs"] == pytest.approx([-0.3, -0.2], rel=1e-9) and fast["mean"] == pytest.approx(-0.25, rel=1e-9)
    assert out["paired"]["prompt"]["gain"]["mean"] == pytest.approx(-0.4, rel=1e-9)
    # Fastest training arm: "fast" (2 min); at 2 min "ref" had only its start evaluations.
    assert out["equal_wall_time"]["fastest"] == "fast" and out["equal_wall_time"]["minutes"] == pytest.approx(2.0)
    assert out["equal_wall_time"]["success"]["ref"] == pytest.approx(0.15, rel=1e-9)
    assert out["equal_wall_time"]["success"]["fast"] == pytest.approx(0.3, rel=1e-9)
    table = (tmp_path / "table.md").read_text()
    assert "| ref | 2 | 55.0 ± 7.1 | 50.0 | 60.0 | 50.0, 60.0 | 40.0 ± 0.0 |" in table
    assert "| fast | 2 | -25.0 ± 7.1 | separate |" in table
    # Late: with one evaluation after the start it is the final one, per seed and paired.
    assert ref["late"]["mean"] == pytest.approx(0.55, rel=REL) and ref["per_seed"][1]["late"] == 0.6
    assert out["paired"]["fast"]["late"]["diffs"] == pytest.approx([-0.3, -0.2], rel=1e-9)
    assert out["paired"]["prompt"]["late"]["mean"] == pytest.approx(-0.4, rel=1e-9)  # prompt-only: its start
    assert "| 55.0 ± 7.1 | 50.0, 60.0 |\n" in table
    assert json.loads((tmp_path / "summary.json").read_text())["suite"] == "demo"
    assert equal_wall_time({"prompt": results["prompt"]})[0] is None


@pytest.mark.parametrize("suite", sorted(suites.SUITES))
def test_every_arm_is_a_valid_config(suite: str) -> None:
    s = suites.SUITES[suite]
    assert s.reference in {a.name for a in s.arms}
    for arm in s.arms:
        cfg = load_config(s.config_file(arm), runs.run_sets(s, arm, 7, Path("/tmp/x"), None, []))
        assert cfg.run.seed == 7 and set(cfg.policies) == set(arm.policies)
        assert not s.model_seed or all(p.tiny.seed == 7 for p in cfg.policies.values())
        if s.steps is not None:
            assert (cfg.run.steps, cfg.run.time_limit_s) == (0 if arm.prompt_only else s.steps, 0.0)


def test_identical_arms_of_different_suites_share_one_run() -> None:
    def folder(suite: str, arm: str, steps: int | None = None, extra: list[str] | None = None) -> Path:
        s = suites.SUITES[suite]
        return runs.run_dir(Path("/r"), s, next(a for a in s.arms if a.name == arm), 1, steps, extra)

    default = folder("ordering", "mas_atgrpo")
    assert default == folder("grouping", "agent_turn") == folder("alpha", "alpha1")
    assert default.name == "seed1" and default.parent.parent == Path("/r/shared")
    assert folder("ordering", "mas_trajectory") == folder("grouping", "trajectory") != default
    assert folder("ordering", "mas_atgrpo", steps=50) != default  # another budget is another run
    assert folder("ordering", "mas_atgrpo", extra=["rollout.k=2"]) != default
    assert folder("ordering", "sa_grpo") == Path("/r/ordering/sa_grpo/seed1")
    assert folder("ordering", "sa_grpo", steps=100) == Path("/r/ordering/sa_grpo/seed1")  # the suite's own budget


def test_a_variant_never_reads_back_or_overwrites_the_suites_own() -> None:
    s = suites.SUITES["ordering"]
    arm = next(a for a in s.arms if a.name == "sa_grpo")
    own = runs.run_dir(Path("/r"), s, arm, 0)
    hot = runs.run_dir(Path("/r"), s, arm, 0, extra=["rollout.temperature=1.0"])
    short = runs.run_dir(Path("/r"), s, arm, 0, steps=20)
    assert len({own, hot, short}) == 3 and hot.parent.name.startswith("sa_grpo-")
    assert hot == runs.run_dir(Path("/r"), s, arm, 0, extra=["rollout.temperature=1.0"])  # resumable
    assert runs.report_dir(Path("/r"), s) == runs.report_dir(Path("/r"), s, steps=100) == Path("/r/ordering")
    assert runs.variant_overrides(s, 100, []) == []  # the suite's own budget, said explicitly: not a variant
    assert runs.variant_overrides(s, 100, ["rollout.k=8"]) == ["--set rollout.k=8"]
    assert runs.variant_overrides(s, 20, []) == ["--steps 20"]
    assert runs.report_dir(Path("/r"), s, extra=["rollout.temperature=1.0"]).parent == Path("/r")
    assert runs.report_dir(Path("/r"), s, extra=["rollout.temperature=1.0"]) != runs.report_dir(Path("/r"), s, steps=20)


def test_the_ordering_arms_are_the_papers() -> None:
    arms = {a.name: a for a in suites.SUITES["ordering"].arms}
    sa = load_config(None, runs.run_sets(suites.SUITES["ordering"], arms["sa_grpo"], 0, Path("/x"), None, []))
    assert (sa.task.roles, sa.rollout.sampling, sa.rollout.grouping) == (["plan"], "parallel", "trajectory")
    roles = load_config(
        None, runs.run_sets(suites.SUITES["ordering"], arms["mas_atgrpo_roles"], 3, Path("/x"), None, [])
    )
    default = load_config(None, runs.run_sets(suites.SUITES["ordering"], arms["mas_atgrpo"], 3, Path("/x"), None, []))
    assert roles.agent_policy() == {"tool": "tool", "plan": "plan"}  # the paper's "one policy per role" row
    assert all(p == default.policies["shared"] for p in roles.policies.values())  # else the default's policy
    assert (roles.rollout, roles.task, roles.warmstart) == (default.rollout, default.task, default.warmstart)


def test_the_time_budget_suite_keeps_a_constant_lr() -> None:
    """A decay follows run.steps, which a time-budget run never reaches: its lr would hardly move."""
    suite = suites.SUITES["staleness"]
    for arm in suite.arms:
        cfg = load_config(None, runs.run_sets(suite, arm, 0, Path("/x"), None, []))
        assert cfg.run.time_limit_s > 0 and cfg.policies["shared"].lr_schedule == "constant"


def test_help_lists_the_suites_and_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    """`atgrpo-bench learning --help` names every suite and every subcommand (words its parser never
    sees: they are handed on first), and a subcommand's own --help is reached through it."""
    with pytest.raises(SystemExit) as done:
        bench_cli.main(["learning", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in suites.SUITES)
    listed = out.split("subcommands (each with its own --help):\n")[1]
    assert re.findall(r"^  (\w+) ", listed, re.M) == list(cli.SUBCOMMANDS) == ["report", "steps", "warmstart", "forks"]
    for name in ("report", "steps"):  # warmstart's --help: its own test file (it imports torch)
        with pytest.raises(SystemExit) as done:
            bench_cli.main(["learning", name, "--help"])
        assert done.value.code == 0 and f"usage: atgrpo-bench learning {name} " in capsys.readouterr().out


def test_bad_arms_and_failed_runs_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ordering", "--only", "nope", "--out", str(tmp_path)]) == 1
    assert "no arm ['nope'] in suite 'ordering'" in capsys.readouterr().err
    assert not tmp_path.joinpath("ordering").exists()  # refused before any run
    # A run that fails (here a config atgrpo-train refuses at once) stops the suite, naming its log.
    ordering = suites.SUITES["ordering"]
    bad = runs.run_dir(
        tmp_path, ordering, next(a for a in ordering.arms if a.name == "mas_prompt"), 0, extra=["rollout.k=0"]
    )
    with pytest.raises(LearningSuiteError, match=r"mas_prompt-[0-9a-f]+/seed0 failed \(exit [1-9].*bench\.log"):
        runner.run_suite(ordering, out=tmp_path, seeds=(0,), only=("mas_prompt",), extra=["rollout.k=0"])
    assert "k, envs_per_step and envs_per_unit must be >= 1" in (bad / "bench.log").read_text()
    assert not (bad / "eval.json").exists()
    # A finished run without evaluations cannot be tabled: said, not a TypeError.
    (bad / "eval.json").write_text('{"steps": 3, "eval_start": null, "eval_end": null}')
    with pytest.raises(LearningSuiteError, match="no start or end evaluation"):
        runner.read_run(bad)
    # Nor one whose metrics rows lack their durations (minutes of RL cannot be counted).
    (bad / "eval.json").write_text('{"steps": 1, "eval_start": 0.1, "eval_end": 0.2}')
    (bad / "metrics.jsonl").write_text('{"step": 0, "eval/success": 0.1, "time/eval_s": 1.0}\n{"step": 1}\n')
    with pytest.raises(LearningSuiteError, match="metrics.jsonl: a row has no 'time/step_s'"):
        runner.read_run(bad)


TINY = [
    "run.eval_seeds=2",
    "run.eval_every=1",
    "warmstart.steps=2",
    "warmstart.batch_size=4",
    "rollout.envs_per_step=2",
    "rollout.envs_per_unit=2",
    "rollout.k=2",
    "rollout.max_new_tokens=8",
    "task.turns=2",
    "task.env={width=6,height=6}",
    "launch.actors=1",
    "policies.shared.tiny.hidden_size=32",
    "policies.shared.tiny.num_layers=1",
    "policies.shared.tiny.intermediate_size=64",
    "policies.shared.tiny.num_heads=2",
    "policies.shared.tiny.num_kv_heads=1",
]


SMOLLM2_TINY = [
    "run.eval_seeds=2",
    "run.eval_every=1",
    "warmstart.steps=0",
    "rollout.envs_per_step=2",
    "rollout.envs_per_unit=2",
    "rollout.k=2",
    "rollout.max_new_tokens=8",
    'rollout.engine="torch"',
]
"""The real-model recipes cut to a few seconds a step (the torch engine starts faster than vLLM; no
warm start: its steps on 135M weights are not what this test checks, tests/learner/test_lora_warmstart.py
warm-starts SmolLM2 adapters)."""


@pytest.fixture(scope="module")
def suites_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One results root for every suite's tiny runs, so arms shared between suites (the default,
    AT-GRPO) run once, as in the real suites."""
    return tmp_path_factory.mktemp("learning")


def check_tables(out: Path, suite: str, arms: tuple[str, ...], seeds: tuple[int, ...], extra: list[str]) -> dict:
    """The suite's summary.json against the runs' own eval.json: per-seed values, and mean and sd
    recomputed from them (one seed: no sd); returns the summary."""
    s = suites.SUITES[suite]
    where = runs.report_dir(out, s, 1, extra)
    assert where.name.startswith(f"{suite}-")  # a variant of the suite: never its own table's folder
    summary = json.loads((where / "summary.json").read_text())
    assert summary["overrides"] == runs.variant_overrides(s, 1, extra)
    for name in arms:
        arm = next(a for a in s.arms if a.name == name)
        finals = []
        for seed in seeds:
            folder = runs.run_dir(out, s, arm, seed, 1, extra)
            ev = json.loads((folder / "eval.json").read_text())
            assert ev["steps"] == (0 if name == "mas_prompt" else 1)
            finals.append(ev["eval_end"])
            wall = json.loads((folder / "wall.json").read_text())
            # The kernels the run computed with: the pin, or what this environment chose.
            assert wall["cpu_isa"] == {k: os.environ.get(k, v) for k, v in runner.CPU_ISA_PIN.items()}
            assert summary["arms"][name]["per_seed"][str(seed)]["final"] == ev["eval_end"]
            # One evaluation after the start at one step (none for prompt-only): late is the final one.
            assert summary["arms"][name]["per_seed"][str(seed)]["late"] == pytest.approx(ev["eval_end"], rel=REL)
        want = summarize(finals)
        assert summary["arms"][name]["final"]["mean"] == pytest.approx(want.mean, rel=REL, abs=1e-15)
        if len(seeds) > 1:
            assert summary["arms"][name]["final"]["sd"] == pytest.approx(want.sd, rel=REL, abs=1e-15)
        else:  # one seed is never certain: no sd (test_summarize_known_values)
            assert math.isnan(summary["arms"][name]["final"]["sd"])
    assert (where / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return summary


def run_tiny(out: Path, suite: str, arms: tuple[str, ...], extra: list[str], seeds: tuple[int, ...] = (0, 1)) -> dict:
    argv = [suite, "--only", ",".join(arms), "--seeds", ",".join(map(str, seeds)), "--steps", "1", "--out", str(out)]
    assert cli.main([*argv, *(a for s in extra for a in ("--set", s))]) == 0
    return check_tables(out, suite, arms, seeds, extra)


@pytest.mark.integration
def test_two_arms_two_seeds_end_to_end_then_resume(suites_out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = run_tiny(suites_out, "ordering", ("mas_prompt", "mas_atgrpo"), TINY)
    assert summary["arms"]["mas_prompt"]["gain"]["max"] == 0.0  # no RL: the end is the start
    assert summary["paired"]["mas_prompt"]["final"]["seeds"] == [0, 1]

    def rerun(*_: object) -> None:
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(runner, "run_one", rerun)
    again = runner.run_suite(
        suites.SUITES["ordering"],
        out=suites_out,
        seeds=(0, 1),
        steps=1,
        only=("mas_prompt", "mas_atgrpo"),
        extra=TINY,
    )
    assert again["table"] == summary["table"]
    with pytest.raises(LearningSuiteError, match="no arm"):
        runner.run_suite(suites.SUITES["ordering"], out=suites_out, only=("nope",))


@pytest.mark.integration
@pytest.mark.parametrize(
    ("suite", "arms", "extra", "seeds"),
    [
        ("grouping", ("agent", "agent_turn"), TINY, (0, 1)),  # agent_turn: ordering's mas_atgrpo runs, read back
        ("alpha", ("alpha0", "alpha1"), TINY, (0, 1)),
        # One seed each for the suites whose runs cost the most (staleness: both arms run; smollm2: the
        # real model): a second seed repeats the same runs, and the tables of two seeds (sd, pairing over
        # seeds) are checked on the suites above and in test_two_arms_two_seeds_end_to_end_then_resume.
        ("staleness", ("k0", "k1"), TINY, (0,)),
        ("smollm2", ("smollm2", "smollm2_lora"), SMOLLM2_TINY, (0,)),  # full fine-tuning and a LoRA adapter per role
    ],
    ids=["grouping", "alpha", "staleness", "smollm2"],
)
def test_each_suite_tables_its_tiny_runs(
    suites_out: Path, suite: str, arms: tuple[str, ...], extra: list[str], seeds: tuple[int, ...], smollm2: Path
) -> None:
    summary = run_tiny(suites_out, suite, arms, extra, seeds)
    ref = suites.SUITES[suite].reference
    for name in arms:
        if name != ref:  # paired against the reference seed by seed: the differences of the tabled values
            paired_final = summary["paired"][name]["final"]
            per = summary["arms"]
            want = [per[name]["per_seed"][str(s)]["final"] - per[ref]["per_seed"][str(s)]["final"] for s in seeds]
            assert paired_final["seeds"] == list(seeds)
            assert paired_final["diffs"] == pytest.approx(want, rel=REL, abs=1e-15)


def test_no_run_tables_the_finished_runs_and_lists_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: object) -> None:
        raise AssertionError("--no-run started a run")

    monkeypatch.setattr(runner, "run_one", never)
    suite = suites.SUITES["alpha"]
    with pytest.raises(LearningSuiteError, match="no finished run"):
        runner.run_suite(suite, out=tmp_path, seeds=(0, 1), run_missing=False)
    fake_finished_run(tmp_path, suite, "alpha0", 1)
    summary = runner.run_suite(suite, out=tmp_path, seeds=(0, 1), run_missing=False)
    assert list(summary["arms"]) == ["alpha0"] and summary["arms"]["alpha0"]["per_seed"][1]["gain"] == pytest.approx(
        0.25
    )
    assert summary["missing"] == [
        "alpha0 seed 0",
        "alpha0_5 seed 0",
        "alpha0_5 seed 1",
        "alpha1 seed 0",
        "alpha1 seed 1",
    ]
    assert "Not run yet (5): alpha0 seed 0," in summary["table"]


def fake_finished_run(out: Path, suite: suites.Suite, name: str, seed: int, made_with: tuple[str, ...] = ()) -> Path:
    """A finished run's files as `atgrpo-train` leaves them: eval.json, metrics.jsonl, and the resolved
    config of the arm's command (with `made_with` overrides on top, as if the command had changed since)."""
    arm = next(a for a in suite.arms if a.name == name)
    folder = runs.run_dir(out, suite, arm, seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "eval.json").write_text('{"steps": 100, "eval_start": 0.2, "eval_end": 0.45}')
    (folder / "metrics.jsonl").write_text(
        '{"step": 0, "time": 0.0, "eval/success": 0.2, "time/eval_s": 5.0}\n'
        '{"step": 100, "time": 60.0, "eval/success": 0.45, "time/eval_s": 5.0}\n'
    )
    sets = [*runs.run_sets(suite, arm, seed, folder.resolve(), None, []), *made_with]
    (folder / "config.toml").write_text(load_config(None, sets).to_toml())
    return folder


def test_a_run_its_command_no_longer_makes_is_not_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run folders are named by the command, so a changed default or arm would otherwise be tabled
    from runs made before the change."""
    monkeypatch.setattr(runner, "run_one", lambda *_: pytest.fail("a finished run was run again"))
    suite = suites.SUITES["alpha"]

    def read_back() -> dict:
        return runner.run_suite(suite, out=tmp_path, seeds=(1,), only=("alpha0",))

    folder = fake_finished_run(tmp_path, suite, "alpha0", 1, made_with=("run.eval_every=7", "launch.actors=1"))
    assert read_back()["arms"]["alpha0"]["per_seed"][1]["final"] == 0.45  # how it ran, not what it learned
    fake_finished_run(tmp_path, suite, "alpha0", 1, made_with=("rollout.k=3", "policies.shared.lr=5e-5"))
    with pytest.raises(LearningSuiteError, match=r"policies\.shared\.lr, rollout\.k differ .*move the folder away"):
        read_back()
    for garbage in (b"run = [", b"\xff\xfe", b"[run]\nsteps = -3\n"):  # not TOML, not UTF-8, not a valid config
        (folder / "config.toml").write_bytes(garbage)
        with pytest.raises(LearningSuiteError, match="cannot be read as a run config"):
            read_back()
    (folder / "config.toml").unlink()
    with pytest.raises(LearningSuiteError, match="no config.toml"):
        read_back()


def test_the_prompt_templates_are_part_of_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run reads its prompt templates as it reads its config: changed templates name another shared
    folder, and a finished run made with other templates is not read back."""
    suite = suites.SUITES["ordering"]
    shared = next(a for a in suite.arms if a.shared == "default")
    before = runs.run_dir(tmp_path, suite, shared, 0)
    assert runs.prompts_digest() == runs.prompts_digest()  # a digest of the files, stable
    monkeypatch.setattr(runs, "prompts_digest", lambda *_: "other")
    assert runs.run_dir(tmp_path, suite, shared, 0) != before
    monkeypatch.undo()
    monkeypatch.setattr(runner, "run_one", lambda *_: pytest.fail("a finished run was run again"))
    folder = fake_finished_run(tmp_path, suites.SUITES["alpha"], "alpha0", 1)
    (folder / "wall.json").write_text(json.dumps({"wall_s": 60.0, "prompts_digest": runs.prompts_digest()}))
    summary = runner.run_suite(suites.SUITES["alpha"], out=tmp_path, seeds=(1,), only=("alpha0",))
    assert summary["arms"]["alpha0"]["per_seed"][1]["final"] == 0.45
    (folder / "wall.json").write_text(json.dumps({"wall_s": 60.0, "prompts_digest": "0123456789"}))
    with pytest.raises(LearningSuiteError, match="prompt templates"):
        runner.run_suite(suites.SUITES["alpha"], out=tmp_path, seeds=(1,), only=("alpha0",))


def test_the_runner_writes_the_stored_format_with_where_each_run_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atgrpo.bench.learning.results import load, render

    monkeypatch.setattr(runner, "run_one", lambda *_: pytest.fail("a finished run was run again"))
    folder = fake_finished_run(tmp_path, suites.SUITES["alpha"], "alpha0", 1)
    meta = {
        "wall_s": 60.0,
        "cpu": "Some CPU",
        "cores": 2,
        "commit": "abc",
        "session": "s1",
        "prompts_digest": runs.prompts_digest(),
    }
    (folder / "wall.json").write_text(json.dumps(meta))
    summary = runner.run_suite(suites.SUITES["alpha"], out=tmp_path, seeds=(1,), only=("alpha0",))
    stored = load(tmp_path / "alpha" / "results.json")
    run = stored.arms["alpha0"].runs[1]
    assert (run.start, run.final, run.steps, run.cpu, run.cores, run.commit, run.session) == (
        0.2,
        0.45,
        100,
        "Some CPU",
        2,
        "abc",
        "s1",
    )
    assert run.config_digest and len(run.config_digest) == 16 and run.curve and run.rl_min is not None
    assert stored.command == "atgrpo-bench learning alpha"
    # The table the runner printed is the one `atgrpo-bench learning report FILE` rebuilds from that file.
    assert render(stored, "results.json") in summary["table"]
