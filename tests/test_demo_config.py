"""`atgrpo-train` given no file runs the default demo, program-mode Plan-Path (`cli.common.DEMO`,
issue 47), and `cli.common.BUILT_IN` is the file a caller names to run the built-in defaults."""

from __future__ import annotations

from atgrpo.bench.learning import runs, suites
from atgrpo.cli.common import BUILT_IN, DEMO, config_parser, load_run_config
from atgrpo.config import load_config


def test_the_built_in_defaults_file_is_the_built_in_defaults() -> None:
    assert load_config(BUILT_IN) == load_config(None)
    assert load_config(BUILT_IN).task.tool_mode == "answer"


def test_no_file_is_the_program_demo_for_every_entry_point_of_a_run() -> None:
    for prog in ("atgrpo-train", "atgrpo-learner", "atgrpo-actor"):
        cfg = load_run_config(config_parser(prog, "").parse_args(["--set", "run.seed=3"]))
        assert cfg == load_config(DEMO, ["run.seed=3"])
        assert (cfg.task.task, cfg.task.tool_mode, cfg.task.roles) == ("planpath", "program", ["tool", "plan"])
    named = load_run_config(config_parser("atgrpo-train", "").parse_args([str(BUILT_IN)]))
    assert named == load_config(None)


def test_a_suites_arm_on_the_built_in_defaults_names_their_file() -> None:
    suite = suites.SUITES["ordering"]
    arm = next(a for a in suite.arms if a.config is None)
    cmd = runs.command(suite, arm, 0, suites.ENVS / "out", None, [])
    assert cmd[1] == str(BUILT_IN)  # with no file the run would be the program demo
