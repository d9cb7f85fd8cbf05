"""Every `atgrpo-train` and `atgrpo-eval` command of the documentation builds a valid config, for every task.

The documentation is README.md (the front page) and every page of docs/. The commands are read from
their bash blocks (continuation lines joined, comments dropped) and parsed by the CLIs' own parsers;
placeholders (`my.toml`, model folders) are replaced by the built-in defaults and a tiny model folder.
The task packs' commands (`envs/<task>/task.toml`) are checked for every task too, and the README's
Sudoku evaluation is run in-process on the tiny model.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from atgrpo.cli.common import DEMO, config_parser
from atgrpo.cli.eval import build_parser, eval_config, main
from atgrpo.config import GAME_TASKS, TASK_ROLES, TinyModelSpec, load_config
from atgrpo.models import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
TASKS = tuple(TASK_ROLES)
PLACEHOLDER_CONFIGS = {"my.toml"}
"""Config files the documentation names as examples of the reader's own."""
DOC_PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
"""The pages whose commands are checked: the front page and the reference pages it links to."""


def doc_commands(program: str) -> list[list[str]]:
    """The argument lists of every `program ...` line in the bash blocks of every page of DOC_PAGES."""
    return [argv for page in DOC_PAGES for argv in page_commands(page, program)]


def page_commands(page: Path, program: str) -> list[list[str]]:
    """The argument lists of every `program ...` line in the bash blocks of one Markdown page."""
    commands, in_bash, pending = [], False, ""
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_bash = line.strip() == "```bash" and not in_bash
            continue
        if not in_bash:
            continue
        text = pending + line
        if text.rstrip().endswith("\\"):
            pending = text.rstrip()[:-1] + " "
            continue
        pending = ""
        for part in text.split("&&"):
            words = shlex.split(part, comments=True)
            if words and words[0] == program:
                commands.append(words[1:])
    return commands


def train_parser() -> argparse.ArgumentParser:
    """The `atgrpo-train` parser (mirrors `atgrpo.cli.train.main`)."""
    parser = config_parser("atgrpo-train", "", DEMO)
    parser.add_argument("--actors", type=int, default=None)
    parser.add_argument("--print-commands", action="store_true")
    return parser


def with_model(argv: list[str], folder: Path) -> list[str]:
    """`argv` with every model folder (`--model`, `--role-model R=`) pointing at `folder`."""
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word == "--model":
            out[i + 1] = str(folder)
        elif word == "--role-model":
            out[i + 1] = out[i + 1].partition("=")[0] + "=" + str(folder)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = TinyModelSpec(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    return build_tiny_model(spec, tmp_path_factory.mktemp("models") / "tiny")


TRAIN = doc_commands("atgrpo-train")
EVAL = doc_commands("atgrpo-eval")


def test_the_docs_pages_are_read() -> None:
    """The reference pages moved out of the README are checked too, not only the front page."""
    pages = {page.name for page in DOC_PAGES}
    assert {"README.md", "code-and-math.md", "configuration.md", "real-models.md"} <= pages
    assert page_commands(ROOT / "README.md", "atgrpo-train")
    assert page_commands(ROOT / "docs" / "code-and-math.md", "atgrpo-eval")


def test_the_docs_have_commands_for_every_task() -> None:
    assert len(TRAIN) >= 5 and len(EVAL) >= 4
    trained = {load_config(*_train_args(argv)).task.task for argv in TRAIN}
    evaluated = {
        a.task or load_config(a.config and ROOT / a.config).task.task for a in map(build_parser().parse_args, EVAL)
    }
    assert trained == set(TASKS)
    assert {"sudoku", "code", "math"} <= evaluated


def _train_args(argv: list[str]) -> tuple[str | None, list[str]]:
    args = train_parser().parse_args(argv)
    config = None if args.config in PLACEHOLDER_CONFIGS else str(ROOT / args.config)  # no file: DEMO
    return config, args.overrides


@pytest.mark.parametrize("argv", TRAIN, ids=[" ".join(a) or "(no arguments)" for a in TRAIN])
def test_documented_train_command_builds_a_valid_config(argv: list[str]) -> None:
    cfg = load_config(*_train_args(argv))
    assert set(cfg.role_policy) == set(cfg.task.roles or [])
    assert "max_steps" not in cfg.task.env_params()


@pytest.mark.parametrize("argv", EVAL, ids=[" ".join(a) for a in EVAL])
def test_documented_eval_command_builds_a_valid_config(argv: list[str], tiny: Path) -> None:
    args = build_parser().parse_args(with_model(argv, tiny))
    args.config = args.config and str(ROOT / args.config)
    cfg, folders = eval_config(args)
    assert cfg.task.task == (args.task or load_config(args.config).task.task)
    assert set(folders) == set(cfg.task.roles or [])
    if cfg.task.task in GAME_TASKS:
        assert cfg.task.env_params()  # the task's own keys, not Plan-Path's
    else:
        assert cfg.task.env_params() == {}


@pytest.mark.parametrize("task", TASKS)
def test_eval_of_any_task_on_the_default_config(task: str, tiny: Path) -> None:
    """`atgrpo-eval --task T --model M`: the env parameters become the task's defaults."""
    cfg, _ = eval_config(build_parser().parse_args(["--task", task, "--model", str(tiny)]))
    assert cfg.task.env == load_config(None, [f"task.task={task}"]).task.env


@pytest.mark.parametrize("task", GAME_TASKS)
def test_task_pack_commands(task: str, tiny: Path) -> None:
    """`atgrpo-train envs/T/task.toml` and `atgrpo-eval envs/T/task.toml --model M` for every game."""
    pack = str(ROOT / "envs" / task / "task.toml")
    assert load_config(*_train_args([pack])).task.task == task
    cfg, _ = eval_config(build_parser().parse_args([pack, "--model", str(tiny), "--seeds", "3"]))
    assert cfg.task.task == task and cfg.task.env == load_config(pack).task.env


def test_readme_sudoku_eval_runs(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's `atgrpo-eval --task sudoku --model M --seeds 100`, with 2 seeds and short answers."""
    (argv,) = [a for a in EVAL if "sudoku" in a]
    argv = with_model(argv, tiny)
    argv[argv.index("--seeds") + 1] = "2"
    assert main([*argv, "--turns", "1", "--max-new-tokens", "8"]) == 0
    table = capsys.readouterr().out
    assert "sudoku" in table and "problems  2" in table
