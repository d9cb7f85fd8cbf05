"""`atgrpo-train` given no file runs the default demo, program-mode Plan-Path (`cli.common.DEMO`,
issue 47), and hands that file to its learner and actors; `cli.common.BUILT_IN` is the file a
caller names to run the built-in defaults."""

from __future__ import annotations

import pytest

from atgrpo.bench.learning import runs, suites
from atgrpo.cli import train
from atgrpo.cli.common import BUILT_IN, DEMO, config_parser, load_run_config
from atgrpo.config import load_config


def test_the_built_in_defaults_file_is_the_built_in_defaults() -> None:
    assert load_config(BUILT_IN) == load_config(None) == load_config(BUILT_IN.parent / "planpath" / "train.toml")
    assert load_config(BUILT_IN).task.tool_mode == "answer"
    # Under any override, another task's included (the answer-mode demo's file names Plan-Path's
    # roles and env keys, which a code task refuses).
    other = ['task.task="code"', "rollout.k=2"]
    assert load_config(BUILT_IN, other) == load_config(None, other)


def test_no_file_is_the_program_demo_and_the_children_get_it(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(DEMO, ["run.seed=3"])
    assert (cfg.task.task, cfg.task.tool_mode, cfg.task.roles) == ("planpath", "program", ["tool", "plan"])
    assert train.main(["--print-commands", "--set", "run.seed=3"]) == 0
    printed = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("atgrpo-learner ", "atgrpo-actor "))]
    assert len(printed) == 2 and all(f" {DEMO} --set run.seed=3 " in ln for ln in printed)
    # A learner or an actor started by hand with no file reads the built-in defaults.
    assert load_run_config(config_parser("atgrpo-learner", "").parse_args([])) == load_config(None)


def test_a_suites_arm_on_the_built_in_defaults_names_their_file() -> None:
    suite = suites.SUITES["ordering"]
    arm = next(a for a in suite.arms if a.config is None)
    cmd = runs.command(suite, arm, 0, suites.ENVS / "out", None, [])
    assert cmd[1] == str(BUILT_IN)  # with no file the run would be the program demo
