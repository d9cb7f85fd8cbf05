"""Argument and logging set-up shared by the entry points."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from atgrpo.config import RunConfig, load_config

DEMO = Path(__file__).resolve().parents[3] / "envs" / "planpath" / "train_program.toml"
"""The config of `atgrpo-train` given no file (it hands the file to its learner and actors): the
default demo, a program-writing tool agent and a planner on Plan-Path (issue 47: 4% -> 100% held
out on each of 3 seeds, 20-21 minutes a run on 2 cores). `BUILT_IN` is the answer-mode demo before it."""
BUILT_IN = DEMO.parents[1] / "defaults.toml"
"""The built-in defaults as a file, one that names nothing: what a caller of `atgrpo-train` names to
run them (since no file there means `DEMO`), with any overrides, another task's included."""


def config_parser(prog: str, description: str, default: Path | None = None) -> argparse.ArgumentParser:
    """The entry points' shared arguments; `default`: the config file read when none is given (None:
    the built-in defaults)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    where = f"{default.relative_to(DEMO.parents[2])}" if default is not None else "the built-in defaults"
    p.add_argument("config", nargs="?", default=default, help=f"run config TOML (default: {where})")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set rollout.k=8 (TOML value syntax); repeatable",
    )
    p.add_argument(
        "--curve-keys",
        default=None,
        metavar="DIR",
        help="CURVE key folder from `atgrpo-keys` (sets transport.curve_keys)",
    )
    return p


def load_run_config(args: argparse.Namespace) -> RunConfig:
    overrides = list(args.overrides)
    if getattr(args, "curve_keys", None):
        overrides.append(f"transport.curve_keys={json.dumps(str(args.curve_keys))}")
    try:
        return load_config(args.config, overrides)
    except (ValueError, OSError) as exc:
        sys.exit(f"config error: {exc}")


def setup_logging(component: str) -> logging.Logger:
    level = os.environ.get("ATGRPO_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level, format=f"%(asctime)s {component} %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    for noisy in ("transformers", "DeepSpeed", "deepspeed", "torch.distributed"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # transformers reads these when it is imported. Importing it here instead would cost every entry
    # point seconds before it could report a bad argument or a missing file.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:  # too late for the environment
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    return logging.getLogger(f"atgrpo.{component}")
