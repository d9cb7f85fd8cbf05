"""The launcher's side of the learner's events, and the multi-host commands it prints."""

from __future__ import annotations

import msgspec
import pytest

from atgrpo.cli.train import DEFAULT_PORT
from atgrpo.cli.train import main as train_main
from atgrpo.config import load_config
from atgrpo.launch.local import describe
from atgrpo.messages import (
    EvalSummary,
    HubReady,
    LearnerEvent,
    Notice,
    Resumed,
    RunSummary,
    Stopping,
    WarmStartProgress,
)


@pytest.mark.parametrize(
    ("event", "text"),
    [
        (WarmStartProgress("shared", 3, 10, 1.23456), "[shared] warm start step 3/10 loss 1.235"),
        (Resumed("runs/x/checkpoints/step_000004", 4), "resumed from runs/x/checkpoints/step_000004 at step 4"),
        (
            EvalSummary("step 20", 20, 0.5, 0.7, 200, 3.0),
            "eval (step 20) at step 20: held-out success 0.500 over 200 levels",
        ),
        (Stopping(7, "signal"), "stopping early at step 7 (signal)"),
        (
            RunSummary(12, 0.25, 0.375, 12.5),
            "held-out success (200 eval levels): 25.0% -> 37.5% (+12.5 points) after 12 steps",
        ),
        (HubReady("ipc:///tmp/x"), None),
        (Notice("warning", "the run is learning nothing: ..."), "warning: the run is learning nothing: ..."),
    ],
)
def test_every_event_round_trips_and_reads_as_a_line(event: LearnerEvent, text: str | None) -> None:
    wire = msgspec.json.encode(event)
    assert b"\n" not in wire  # one event per line on the learner's stdout
    assert msgspec.json.decode(wire, type=LearnerEvent) == event
    assert describe(event, load_config()) == text


def print_commands(capsys, *args: str) -> list[str]:
    """The printed learner and actor commands."""
    assert train_main(["--print-commands", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [next(x for x in lines if x.startswith(f"atgrpo-{who} ")) for who in ("learner", "actor")]


def test_printed_commands_use_the_configured_address(capsys) -> None:
    learner, actor = print_commands(capsys)
    assert f"--address tcp://0.0.0.0:{DEFAULT_PORT} " in learner and f"tcp://LEARNER_HOST:{DEFAULT_PORT} " in actor
    learner, actor = print_commands(capsys, "--set", 'transport.endpoint="tcp://0.0.0.0:6123"')
    assert "--address tcp://0.0.0.0:6123 " in learner and "tcp://LEARNER_HOST:6123 " in actor
    learner, actor = print_commands(capsys, "--address", "tcp://10.0.0.5:7001")
    assert "--address tcp://10.0.0.5:7001 " in learner and "tcp://LEARNER_HOST:7001 " in actor


def test_printed_commands_set_up_curve_keys_unless_insecure(capsys) -> None:
    assert train_main(["--print-commands"]) == 0
    out = capsys.readouterr().out
    assert "atgrpo-keys init keys" in out and "atgrpo-keys bundle keys actor actor-keys" in out
    learner, actor = print_commands(capsys)
    assert learner.endswith("--curve-keys keys") and actor.endswith("--curve-keys actor-keys")
    learner, actor = print_commands(capsys, "--curve-keys", "/srv/run-keys")
    assert "--curve-keys /srv/run-keys" in learner
    assert train_main(["--print-commands", "--set", "transport.insecure=true"]) == 0
    out = capsys.readouterr().out
    assert "atgrpo-keys" not in out and "--curve-keys" not in out and "insecure" in out


# Stand-ins for the children, without torch: the actor notes that it started and the address it got
# (from its command line, or from stdin when started before the hub); actor0 exits once first when
# `crash` is set. The learner announces its hub only after every actor has started, so the run can
# end only if the launcher starts actors with the learner and hands them the address later.
FAKE_ACTOR = """
import pathlib, sys
args = sys.argv[1:]
out, crash = pathlib.Path(args[0]), args[1] == "crash"
address, who = args[args.index("--address") + 1], args[args.index("--id") + 1]
(out / f"{who}.started").touch()
if crash and who == "actor0" and not (out / "crashed").exists():
    (out / "crashed").touch()
    sys.exit(1)
(out / f"{who}.address").write_text(address if address != "-" else sys.stdin.readline().strip())
"""
FAKE_LEARNER = """
import pathlib, sys, time
out, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])
def wait_for(suffix):
    deadline = time.monotonic() + 60
    while sum(1 for _ in out.glob("actor*" + suffix)) < n:
        if time.monotonic() > deadline:
            sys.exit(f"awaited {n} actor*{suffix} files")
        time.sleep(0.05)
wait_for(".started")
print('{"type": "hub_ready", "address": "ipc:///fake/hub.sock"}', flush=True)
wait_for(".address")
print('{"type": "finished", "steps": 0, "eval_start": null, "eval_end": null, "improvement_points": null}', flush=True)
"""


@pytest.mark.parametrize("crash", [False, True])
def test_actors_start_with_the_learner_and_get_the_address_when_the_hub_is_up(tmp_path, crash) -> None:
    import sys

    from atgrpo.launch.local import LocalRun

    cfg = load_config(overrides=[f'run.out_dir="{tmp_path / "run"}"'])
    learner = [sys.executable, "-c", FAKE_LEARNER, str(tmp_path), "2"]
    actor = [sys.executable, "-c", FAKE_ACTOR, str(tmp_path), "crash" if crash else "-"]
    run = LocalRun(cfg, learner, actor, 2)
    assert run.run() == 0
    assert [(tmp_path / f"actor{i}.address").read_text() for i in (0, 1)] == ["ipc:///fake/hub.sock"] * 2
    assert run.restarts == ({0: 1} if crash else {})  # a crash while waiting: restarted, and it got the address too


def test_an_actor_whose_stdin_closes_before_the_address_says_so_and_exits_2() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "atgrpo.cli.actor", "--address", "-"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "stdin closed before the hub's address came" in done.stderr and "Traceback" not in done.stderr


def test_the_launcher_of_a_cpu_run_imports_no_torch() -> None:
    """What atgrpo-train imports before it starts its children (its GPU plan included): torch would
    add seconds to every run's start, before the learner even begins."""
    import subprocess
    import sys

    code = (
        "import sys, atgrpo.cli.train, atgrpo.launch.gpu_plan, atgrpo.launch.local;"
        "from atgrpo.config import load_config; assert atgrpo.launch.gpu_plan.check_plan(load_config()) == [];"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_an_actor_that_cannot_be_placed_stops_the_run_and_leaves_no_learner(tmp_path, monkeypatch) -> None:
    import os
    import sys

    from atgrpo.errors import PlacementError
    from atgrpo.launch.local import LocalRun

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the launcher sees one GPU; the actor is told GPU 1
    cfg = load_config(overrides=[f'run.out_dir="{tmp_path / "run"}"', "launch.actor_devices=[1]"])
    pid_file = tmp_path / "learner.pid"
    learner = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)",
    ]
    with pytest.raises(PlacementError, match="launcher sees 1"):
        LocalRun(cfg, learner, [sys.executable, "-c", "pass"], 1).run()
    if pid_file.exists():  # it may have been stopped before it wrote its pid
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)


def torchrun_has_shutdown_timeout() -> bool:
    from torch.distributed.run import get_args_parser

    return any("--shutdown-timeout" in a.option_strings for a in get_args_parser()._actions)


def test_torchrun_gives_the_ranks_the_launchers_grace_after_a_signal() -> None:
    """torchrun kills its ranks 30 s after it forwards a signal unless told otherwise; the learner
    needs minutes to checkpoint and evaluate (`GRACE_S`). The flag is read by torch's own parser."""
    from torch.distributed.run import get_args_parser

    from atgrpo.launch.local import GRACE_S, TORCHRUN_SHUTDOWN_S, learner_command

    cmd = learner_command(["python", "-m", "atgrpo.cli.learner", "--config", "x.toml"], 4)
    if not torchrun_has_shutdown_timeout():  # torch 2.11 (the H200 machine's): left out, with a warning
        assert not any(a.startswith("--shutdown-timeout") for a in cmd)
        pytest.skip("this torch's torchrun has no --shutdown-timeout (the pin, torch 2.13, has it)")
    assert f"--shutdown-timeout={TORCHRUN_SHUTDOWN_S}" in cmd
    args = get_args_parser().parse_args(cmd[3:])
    assert args.shutdown_timeout == TORCHRUN_SHUTDOWN_S and args.nproc_per_node == "4"
    assert (
        args.module
        and args.training_script == "atgrpo.cli.learner"
        and args.training_script_args == ["--config", "x.toml"]
    )
    assert 300 <= TORCHRUN_SHUTDOWN_S < GRACE_S  # minutes, and torchrun's kill comes before the launcher's
