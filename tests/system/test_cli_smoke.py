"""atgrpo-train as a user runs it: --print-commands, a tiny run to the end (exit 0, every output file,
the held-out success line), a bad config, and Ctrl-C (or SIGTERM) during training (exit 130 / 143, a
checkpoint, the final evaluation, and no learner or actor process left behind)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from systest_util import (
    REFERENCE_STEPS,
    Processes,
    Run,
    child_env,
    module_cmd,
    read_rows,
    set_args,
    tiny_sets,
    train_rows,
    wait_for,
)

from atgrpo.cli.common import BUILT_IN, config_parser, load_run_config
from atgrpo.config import load_config


def train_cmd(*args: str) -> list[str]:
    """The installed `atgrpo-train` console script if there is one, else the module, on the built-in
    defaults (no file would be the program demo)."""
    exe = shutil.which("atgrpo-train")
    return [exe, str(BUILT_IN), *args] if exe else module_cmd("atgrpo.cli.train", str(BUILT_IN), *args)


def test_print_commands(tmp_path: Path) -> None:
    sets = tiny_sets(tmp_path / "out", run__name='"my run"')
    done = subprocess.run(
        train_cmd(*set_args(sets), "--print-commands"), capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 4, done.stdout  # two key commands, then the learner and the actor
    keys_init, keys_bundle, learner, actor = (shlex.split(line.split("#")[0]) for line in lines)
    assert keys_init == ["atgrpo-keys", "init", "keys"] and keys_bundle == [
        "atgrpo-keys",
        "bundle",
        "keys",
        "actor",
        "actor-keys",
    ]
    assert learner[0] == "atgrpo-learner" and learner[-4:] == [
        "--address",
        "tcp://0.0.0.0:5555",
        "--curve-keys",
        "keys",
    ]
    assert actor[0] == "atgrpo-actor" and actor[-4:] == [
        "--address",
        "tcp://LEARNER_HOST:5555",
        "--curve-keys",
        "actor-keys",
    ]
    # Pasted into a shell, both commands load exactly the launcher's config, plus their key folder.
    want = load_config(BUILT_IN, sets)
    for argv, folder in ((learner, "keys"), (actor, "actor-keys")):
        args = config_parser(argv[0], "").parse_args([*argv[1:-4], *argv[-2:]])  # without the --address pair
        assert load_run_config(args) == want.model_copy(
            update={"transport": want.transport.model_copy(update={"curve_keys": folder})}
        )
    assert want.run.name == "my run"
    assert not (tmp_path / "out").exists()  # nothing was started


def test_bad_config_fails_fast_with_the_key(tmp_path: Path) -> None:
    start = time.monotonic()
    done = subprocess.run(
        train_cmd("--set", "rollout.k=0", "--set", f"run.out_dir={json.dumps(str(tmp_path))}"),
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert done.returncode != 0
    assert "config error" in done.stderr and "k, envs_per_step and envs_per_unit must be >= 1" in done.stderr
    assert time.monotonic() - start < 30
    assert not (tmp_path / "logs").exists()


def test_tiny_run_writes_everything(reference_run: Run) -> None:
    out = reference_run.out_dir
    assert reference_run.returncode == 0
    for name in (
        "metrics.jsonl",
        "eval.json",
        "learning_curve.png",
        "config.toml",
        "logs/learner.log",
        "logs/actor0.log",
    ):
        assert (out / name).is_file(), name
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # `latest` is a link to the newest checkpoint, so its model folder is a path tools can open.
    assert os.readlink(out / "checkpoints/latest") == f"step_{REFERENCE_STEPS:06d}"
    assert (out / "checkpoints/latest/shared/model/config.json").is_file()
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == ["step_000002", "step_000004"]
    summary = json.loads((out / "eval.json").read_text())
    assert summary["steps"] == REFERENCE_STEPS
    assert 0.0 <= summary["eval_start"] <= 1.0 and 0.0 <= summary["eval_end"] <= 1.0
    line = re.search(
        r"held-out success \(4 eval levels\): ([\d.]+)% -> ([\d.]+)% \(([+-][\d.]+) points\) "
        rf"after {REFERENCE_STEPS} steps",
        reference_run.output,
    )
    assert line, reference_run.output[-3000:]
    assert float(line[1]) == pytest.approx(100 * summary["eval_start"], abs=0.05)
    assert float(line[2]) == pytest.approx(100 * summary["eval_end"], abs=0.05)
    rows = read_rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows if "eval/success" in r] == [0, REFERENCE_STEPS]
    assert sorted(reference_run.train_rows()) == list(range(1, REFERENCE_STEPS + 1))
    assert all(r["hub/rejected_total"] == 0.0 for r in reference_run.train_rows().values())
    # Strict on-policy: every trained sample was made by the current weights.
    assert all(r["rollout/staleness_max"] == 0.0 for r in reference_run.train_rows().values())


@pytest.mark.integration
@pytest.mark.parametrize(
    ("sig", "status", "name"),
    [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")],
    ids=["SIGINT", "SIGTERM"],
)
def test_ctrl_c_checkpoints_and_leaves_no_process_behind(
    tmp_path: Path, processes: Processes, sig: int, status: int, name: str
) -> None:
    """SIGINT (Ctrl-C) or SIGTERM to the launcher only: the launcher forwards it to the learner."""
    out = tmp_path / "run"
    out.mkdir()
    steps = 500
    # Every step is evaluated, so the step the run stops at always has its evaluation already.
    sets = tiny_sets(out, run__steps=steps, run__eval_every=1, launch__actors=2)
    launcher = processes.start(train_cmd(*set_args(sets)), tmp_path / "launcher.log")
    wait_for(
        lambda: (out / "metrics.jsonl").is_file() and train_rows(out / "metrics.jsonl"),
        150,
        "the first training step",
        launcher,
    )
    children = processes.remember_children(launcher)
    cmdlines = [" ".join(p.cmdline()) for p in children]
    assert sum("atgrpo.cli.learner" in c for c in cmdlines) == 1, cmdlines
    assert sum("atgrpo.cli.actor" in c for c in cmdlines) == 2, cmdlines
    # Both actors in the run before the signal (one may still be importing torch at the first step);
    # each must then be told to shut down rather than be killed.
    logs = [out / f"logs/actor{i}.log" for i in range(2)]
    wait_for(
        lambda: all(f.is_file() and "joined run" in f.read_text() for f in logs), 150, "both actors to join", launcher
    )

    launcher.send_signal(sig)
    try:
        rc = launcher.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("launcher still running 120 s after Ctrl-C")
    output = (tmp_path / "launcher.log").read_text()
    assert rc == status, output[-3000:]
    assert f"{name}: asking the learner to checkpoint and stop" in output

    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left behind: {[(p.pid, p.cmdline()) for p in alive]}"
    strays = [p.pid for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]
    assert not strays, strays

    latest = os.readlink(out / "checkpoints/latest")
    stopped_at = int(latest.removeprefix("step_"))
    assert 1 <= stopped_at < steps
    state = json.loads((out / "checkpoints" / latest / "state.json").read_text())
    assert state["step"] == stopped_at and state["versions"] == {"shared": stopped_at}
    assert (out / "checkpoints" / latest / "shared/learner.pt").is_file()
    assert max(train_rows(out / "metrics.jsonl")) == stopped_at
    learner_log = (out / "logs/learner.log").read_text()
    assert f"stopping early at step {stopped_at}" in learner_log
    assert json.loads((out / "eval.json").read_text())["steps"] == stopped_at  # the final eval ran
    # ... once: the weights it stopped on were evaluated at that step, and are not evaluated again.
    assert sum(1 for r in read_rows(out / "metrics.jsonl") if "eval/success" in r and r["step"] == stopped_at) == 1
    for i in range(2):
        assert "shutdown (training finished)" in (out / f"logs/actor{i}.log").read_text()
