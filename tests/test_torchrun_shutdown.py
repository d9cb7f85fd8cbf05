"""Ctrl-C on a multi-rank learner: torchrun forwards the signal and waits `TORCHRUN_SHUTDOWN_S`
(`--shutdown-timeout`) before it kills the ranks, so a rank that needs longer than torchrun's own
default to checkpoint finishes. Stand-in ranks (`torchrun_child.py`), no GPU; the control run with
a shorter timeout shows the ranks are killed when it runs out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch.distributed.run import get_args_parser

from atgrpo.launch.local import TORCHRUN_SHUTDOWN_S, learner_command

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not any("--shutdown-timeout" in a.option_strings for a in get_args_parser()._actions),
        reason="this torch's torchrun has no --shutdown-timeout (torch 2.11 on the H200 machine); the pin, torch 2.13, has it",
    ),
]

HERE = Path(__file__).resolve().parent
CHECKPOINT_S = 4.0
"""What a stand-in rank spends after the signal: longer than the control's timeout."""


def _interrupted_run(tmp_path: Path, shutdown_s: int | None) -> list[str]:
    """Start 2 stand-in ranks under the launcher's torchrun command, Ctrl-C torchrun once they are up;
    returns the files the ranks wrote. `shutdown_s`: replaces the command's shutdown timeout."""
    cmd = learner_command([sys.executable, "-m", "torchrun_child", str(tmp_path), str(CHECKPOINT_S)], 2)
    assert f"--shutdown-timeout={TORCHRUN_SHUTDOWN_S}" in cmd
    if shutdown_s is not None:
        cmd = [f"--shutdown-timeout={shutdown_s}" if a.startswith("--shutdown-timeout") else a for a in cmd]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready-{r}").exists() for r in (0, 1)):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "the stand-in ranks did not start"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return sorted(p.name for p in tmp_path.iterdir())


def test_the_ranks_get_the_launchers_grace_to_checkpoint(tmp_path: Path) -> None:
    assert _interrupted_run(tmp_path, None) == ["ready-0", "ready-1", "saved-0", "saved-1"]


def test_control_a_shorter_timeout_kills_them_mid_checkpoint(tmp_path: Path) -> None:
    assert _interrupted_run(tmp_path, 1) == ["ready-0", "ready-1"]
