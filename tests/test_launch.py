"""The launcher's side of the learner's events, and the multi-host commands it prints."""

from __future__ import annotations

import msgspec
import pytest

from atgrpo.cli.train import DEFAULT_PORT, main as train_main
from atgrpo.config import load_config
from atgrpo.launch.local import describe
from atgrpo.messages import EvalSummary, HubReady, LearnerEvent, Resumed, RunSummary, Stopping, WarmStartProgress


@pytest.mark.parametrize(
    ("event", "text"),
    [
        (WarmStartProgress("shared", 3, 10, 1.23456), "[shared] warm start step 3/10 loss 1.235"),
        (Resumed("runs/x/checkpoints/step_000004", 4), "resumed from runs/x/checkpoints/step_000004 at step 4"),
        (EvalSummary("step 20", 20, 0.5, 0.7, 200, 3.0), "eval (step 20) at step 20: held-out success 0.500 over 200 levels"),
        (Stopping(7, "signal"), "stopping early at step 7 (signal)"),
        (RunSummary(12, 0.25, 0.375, 12.5), "held-out success (200 eval levels): 25.0% -> 37.5% (+12.5 points) after 12 steps"),
        (HubReady("ipc:///tmp/x"), None),
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
