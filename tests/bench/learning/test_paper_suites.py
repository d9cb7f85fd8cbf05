"""The paper's suites in program mode (`paper_planpath`, `paper_sudoku`, issue 47): each arm is the
paper's row as overrides of the task pack's program config, and each run keeps the transcripts of
held-out episodes, written by `atgrpo-eval --transcripts` on its final checkpoint (a scripted engine
and sandbox stand in for the model and the real sandbox)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from atgrpo.bench.learning import runner, runs, suites
from atgrpo.cli import eval as eval_cli
from atgrpo.config import TinyModelSpec, load_config
from atgrpo.engines import torch_engine
from atgrpo.errors import LearningSuiteError
from atgrpo.models import build_tiny_model
from atgrpo.workflows import programs
from tests.workflows.scripted import ScriptedEngine
from tests.workflows.tool_batch import ScriptedSandbox, fence

PLANPATH, SUDOKU = suites.SUITES["paper_planpath"], suites.SUITES["paper_sudoku"]


def resolved(suite: suites.Suite, name: str, seed: int = 3):
    arm = next(a for a in suite.arms if a.name == name)
    return load_config(suite.config_file(arm), runs.run_sets(suite, arm, seed, Path("/x"), None, []))


def test_the_arms_are_the_papers_rows_on_the_program_configs() -> None:
    assert [a.name for a in PLANPATH.arms] == [
        "sa_prompt",
        "sa_grpo",
        "mas_prompt",
        "mas_trajectory",
        "mas_atgrpo",
        "mas_atgrpo_roles",
        "mas_agent",
        "mas_turn",
    ]
    assert [a.name for a in SUDOKU.arms] == ["sa_prompt", "sa_grpo", "mas_prompt", "mas_atgrpo"]
    for suite, task in ((PLANPATH, "planpath"), (SUDOKU, "sudoku")):
        assert (suite.reference, suite.steps, suite.seeds, suite.transcripts) == ("mas_atgrpo", 200, (0, 1, 2), 20)
        for arm in suite.arms:
            cfg = resolved(suite, arm.name)
            assert suite.config_file(arm) == suites.ENVS / task / "train_program.toml"
            assert (cfg.task.task, cfg.task.tool_mode, cfg.run.eval_seeds) == (task, "program", 200)
            single = arm.name.startswith("sa_")
            assert cfg.task.roles == (["plan"] if single else ["tool", "plan"])  # the planner alone: no tool
            assert cfg.run.steps == (0 if arm.name.endswith("_prompt") else 200)
        sa = resolved(suite, "sa_grpo")
        assert (sa.rollout.sampling, sa.rollout.grouping) == ("parallel", "trajectory")
        mas = resolved(suite, "mas_atgrpo")
        assert (mas.rollout.sampling, mas.rollout.grouping) == ("tree", "agent_turn")
    for name, grouping in (("mas_trajectory", "trajectory"), ("mas_agent", "agent"), ("mas_turn", "turn")):
        assert resolved(PLANPATH, name).rollout.grouping == grouping


def test_one_policy_per_role_keeps_the_program_configs_policy_and_the_seed() -> None:
    roles, default = resolved(PLANPATH, "mas_atgrpo_roles"), resolved(PLANPATH, "mas_atgrpo")
    assert roles.agent_policy() == {"tool": "tool", "plan": "plan"} and set(roles.policies) == {"tool", "plan"}
    # The program tokenizer, its context and lr, and the run's seed: the shared policy's, twice.
    assert all(p == default.policies["shared"] for p in roles.policies.values())
    assert default.policies["shared"].tiny.seed == 3
    assert (roles.rollout, roles.task, roles.warmstart) == (default.rollout, default.task, default.warmstart)


def test_a_sudoku_run_reads_the_sudoku_packs_prompts_and_config() -> None:
    arm = SUDOKU.arms[-1]
    cmd = runs.command(SUDOKU, arm, 0, Path("/o"), None, [])
    assert cmd[cmd.index("--set") - 1] == str(suites.ENVS / "sudoku" / "train_program.toml")
    assert runs.prompts_digest(SUDOKU.configs) != runs.prompts_digest()  # its own templates, not Plan-Path's


def finished_run(folder: Path, suite: suites.Suite, name: str, seed: int) -> None:
    """What `atgrpo-train` leaves: eval.json, metrics.jsonl and the resolved config of the arm's command."""
    arm = next(a for a in suite.arms if a.name == name)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "eval.json").write_text('{"steps": 200, "eval_start": 0.05, "eval_end": 0.5}')
    (folder / "metrics.jsonl").write_text(
        '{"step": 0, "time": 0.0, "eval/success": 0.05, "time/eval_s": 5.0}\n'
        '{"step": 200, "time": 60.0, "eval/success": 0.5, "time/eval_s": 5.0}\n'
    )
    sets = runs.run_sets(suite, arm, seed, folder.resolve(), None, [])
    (folder / "config.toml").write_text(load_config(suite.config_file(arm), sets).to_toml())


def test_each_run_keeps_its_transcripts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[Path, int]] = []

    def fake_run(cmd: list[str], folder: Path, *_: object) -> None:
        seed = int(folder.name.removeprefix("seed"))
        finished_run(folder, PLANPATH, folder.parent.name, seed)

    def fake_transcripts(folder: Path, episodes: int, _timeout: float) -> None:
        made.append((folder, episodes))
        (folder / runner.TRANSCRIPTS).write_text("{}\n")

    monkeypatch.setattr(runner, "run_one", fake_run)
    monkeypatch.setattr(runner, "keep_transcripts", fake_transcripts)
    only = ("sa_grpo", "mas_atgrpo")
    runner.run_suite(PLANPATH, out=tmp_path, seeds=(0,), only=only)
    assert made == [(tmp_path / "paper_planpath" / name / "seed0", 20) for name in only]
    (tmp_path / "paper_planpath" / "sa_grpo" / "seed0" / runner.TRANSCRIPTS).unlink()
    runner.run_suite(PLANPATH, out=tmp_path, seeds=(0,), only=only, run_missing=False)
    assert len(made) == 2  # --no-run starts nothing, not even the transcripts
    runner.run_suite(PLANPATH, out=tmp_path, seeds=(0,), only=only)
    assert made[2:] == [(tmp_path / "paper_planpath" / "sa_grpo" / "seed0", 20)]  # the missing one only


def test_a_prompt_arm_is_its_rl_arms_start_evaluation_and_is_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sa_prompt and mas_prompt are the start evaluations of sa_grpo's and mas_atgrpo's runs (the
    same warm-started model, the same greedy evaluation): only the RL arms run, once."""
    ran: list[str] = []

    def fake_run(cmd: list[str], folder: Path, *_: object) -> None:
        ran.append(folder.parent.name)
        finished_run(folder, PLANPATH, folder.parent.name, int(folder.name.removeprefix("seed")))

    monkeypatch.setattr(runner, "run_one", fake_run)
    monkeypatch.setattr(runner, "keep_transcripts", lambda folder, *_: (folder / runner.TRANSCRIPTS).write_text(""))
    only = ("sa_prompt", "sa_grpo", "mas_prompt", "mas_atgrpo")
    summary = runner.run_suite(PLANPATH, out=tmp_path, seeds=(0,), only=only)
    assert ran == ["sa_grpo", "mas_atgrpo"]  # each once: the prompt arm asked first made its source's run
    assert not (tmp_path / "paper_planpath" / "sa_prompt").exists()
    stored = json.loads((tmp_path / "paper_planpath" / "results.json").read_text())
    prompt, rl = stored["arms"]["mas_prompt"]["runs"]["0"], stored["arms"]["mas_atgrpo"]["runs"]["0"]
    assert (prompt["start"], prompt["final"], prompt["steps"]) == (rl["start"], rl["start"], 0) == (0.05, 0.05, 0)
    assert summary["arms"]["mas_prompt"]
    # A source run made with another warm start is not the prompt arm's run: refused, naming the key.
    folder = tmp_path / "paper_planpath" / "mas_atgrpo" / "seed0"
    cfg = load_config(folder / "config.toml")
    changed = cfg.model_copy(update={"warmstart": cfg.warmstart.model_copy(update={"steps": 7})})
    (folder / "config.toml").write_text(changed.to_toml())
    with pytest.raises(LearningSuiteError, match=r"mas_prompt.*warmstart\.steps"):
        runs.check_start_of(folder, PLANPATH, PLANPATH.arms[2], 0, None, [])


SPEC = TinyModelSpec(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1)


def test_the_transcripts_hold_each_program_its_output_and_the_planners_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`atgrpo-eval` with `transcripts_args` on a run of one policy per role: each role's model is
    the final checkpoint's, and each tool row holds the program, what it printed and what that did."""
    folder = tmp_path / "run"
    finished_run(folder, PLANPATH, "mas_atgrpo_roles", 0)
    for policy in ("tool", "plan"):
        build_tiny_model(SPEC, folder / "checkpoints" / "latest" / policy / "model")
    args = runner.transcripts_args(folder, 3)
    _, models = eval_cli.eval_config(eval_cli.build_parser().parse_args(args))
    assert models == {p: str(folder / "checkpoints" / "latest" / p / "model") for p in ("tool", "plan")}
    program = "print('[U]')"

    def answer(text: str, i: int) -> str:
        return fence(program) if "Write a Python program" in text else "[R]"

    monkeypatch.setattr(torch_engine, "TorchEngine", lambda model, policy, **kw: ScriptedEngine(answer, policy))
    monkeypatch.setattr(programs, "stdio_program", lambda code, cases: code)
    monkeypatch.setattr(programs.LazySandbox, "get", lambda self: ScriptedSandbox())
    assert eval_cli.main(args) == 0
    records = [json.loads(line) for line in (folder / runner.TRANSCRIPTS).read_text().splitlines()]
    assert [r["id"] for r in records] == ["seed-0", "seed-1", "seed-2"]  # the first held-out levels
    for r in records:
        tool, plan = r["turns"][0], r["turns"][1]
        assert (tool["agent"], plan["agent"], plan["text"]) == ("tool", "plan", "[R]")
        assert tool["text"] == fence(program) and tool["shown"] == "[U]"
        assert isinstance(tool["alone_valid"], bool) and tool["alone_success"] is False  # one move never solves
        assert "shown" not in plan  # the planner acts on the real state: nothing simulated


def test_transcripts_that_do_not_finish_are_an_error_naming_the_run(tmp_path, monkeypatch) -> None:
    def hang(cmd, timeout, **_):
        raise subprocess.TimeoutExpired(cmd, timeout)

    monkeypatch.setattr(runner, "transcripts_args", lambda out_dir, episodes: ["x"])
    monkeypatch.setattr(runner.subprocess, "run", hang)
    with pytest.raises(LearningSuiteError, match="did not finish in 5 s"):
        runner.keep_transcripts(tmp_path, 20, 5.0)
