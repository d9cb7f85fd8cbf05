"""What the tool agent's programs did (program mode): one batch of tool answers, each of a known kind,
counted into `ToolPrograms` and on through the hub's path into `rollout/tool/*`; nothing of it in
answer mode. Most tests stand a scripted sandbox in for the real one (the workflow builds its own
`PrintedOutput`s from that sandbox's results); the last runs the same batch in the real sandbox."""

from __future__ import annotations

import msgspec
import pytest
from scripted import run_scripted
from tool_batch import ScriptedSandbox, every_kind

from atgrpo.config import load_config
from atgrpo.envs import EnvPool
from atgrpo.learner.hub_rounds import CommittedUnit, StepData
from atgrpo.learner.orchestrator import rollout_metrics
from atgrpo.messages import EvalSummary, LearnerEvent, SampleBatch, ToolPrograms, UnitTimings, WorkUnit
from atgrpo.workflows import programs
from atgrpo.workflows.games import GameWorkflow
from atgrpo.workflows.tool_programs import printed_answer_parses

ENV = "task.env={width=6,height=6,obstacle_ratio=0.2,min_distance=3}"
SEED = 3


def workflow(*sets: str) -> GameWorkflow:
    return GameWorkflow(load_config(None, [ENV, "task.turns=1", *sets]))


def batch(seed: int) -> tuple[list[str], ToolPrograms]:
    return every_kind(workflow().env_config, seed)


def roll_out(answers: list[str], *sets: str, sandbox=None, greedy: bool = False):
    wf = workflow(*sets)
    if sandbox is not None:
        wf.sandbox = sandbox  # type: ignore[assignment]

    def answer(text: str, i: int) -> str:
        return answers[i % len(answers)] if "Write a Python program" in text else "[R]"

    result, _ = run_scripted(wf, answer, [SEED], greedy=greedy)
    return result


@pytest.fixture
def scripted_sandbox(monkeypatch: pytest.MonkeyPatch) -> ScriptedSandbox:
    # A built `Program` does not show its code: the scripted sandbox is handed the text itself.
    monkeypatch.setattr(programs, "stdio_program", lambda code, cases: code)
    return ScriptedSandbox()


def test_each_kind_of_program_is_counted_once_and_the_shares_are_those_counts(scripted_sandbox):
    answers, expected = batch(SEED)
    result = roll_out(answers, "task.tool_mode=program", "rollout.k=7", sandbox=scripted_sandbox)
    assert result.tool_programs == expected
    # Through the hub's path: the actor's last batch on the wire, the committed unit, the step.
    wire = msgspec.msgpack.encode(SampleBatch("a", 0, result.samples, True, result.envs, tool_programs=expected))
    batch_in = msgspec.msgpack.decode(wire, type=SampleBatch)
    unit = WorkUnit(0, 0, [SEED], 0, "train", {"shared": 0})
    committed = CommittedUnit(unit, batch_in.samples, batch_in.env_results, batch_in.timings, batch_in.tool_programs)
    metrics = rollout_metrics(StepData.of(0, [committed, committed], 1.0, lambda s: 0))
    assert metrics["rollout/tool/programs"] == 14.0  # two units' answers
    assert metrics["rollout/tool/program_ran"] == pytest.approx(3 / 7)
    assert metrics["rollout/tool/alone_success"] == pytest.approx(1 / 7)
    for name in ("unparseable", "timed_out", "crashed", "no_compile"):
        assert metrics[f"rollout/tool/{name}"] == pytest.approx(1 / 7)
    assert "rollout/success" in metrics  # team success, as it was


def test_greedy_units_count_their_one_answer_per_turn(scripted_sandbox):
    answers, _ = batch(SEED)
    result = roll_out(answers[:1], "task.tool_mode=program", sandbox=scripted_sandbox, greedy=True)
    assert result.tool_programs == ToolPrograms(answers=1, ran=1, alone_success=1)


def test_answer_mode_counts_nothing_and_reports_no_tool_metrics():
    result = roll_out(["[U]"])
    assert result.tool_programs == ToolPrograms()
    unit = WorkUnit(0, 0, [SEED], 0, "train", {"shared": 0})
    committed = CommittedUnit(unit, result.samples, result.envs, result.timings)
    metrics = rollout_metrics(StepData.of(0, [committed], 1.0, lambda s: 0))
    assert not [k for k in metrics if k.startswith("rollout/tool/") and k != "rollout/tool/reward_mean"]


def test_the_in_training_evaluation_puts_tool_alone_success_beside_team_success():
    counts = ToolPrograms(answers=4, ran=2, alone_success=1, no_compile=2)
    summary = EvalSummary("end", 3, 0.5, 0.1, 4, 1.0, counts)
    metrics = msgspec.json.decode(msgspec.json.encode(summary), type=LearnerEvent).metrics()  # as the launcher reads it
    assert metrics["eval/success"] == 0.5
    assert (metrics["eval/tool/alone_success"], metrics["eval/tool/program_ran"]) == (0.25, 0.5)
    assert not [k for k in EvalSummary("end", 3, 0.5, 0.1, 4, 1.0).metrics() if k.startswith("eval/tool/")]


def test_a_committed_unit_saved_before_the_counts_existed_reads_back():
    """Checkpoints keep untaken units (msgpack); one written without `tool_programs` gets zeros."""
    unit = WorkUnit(0, 0, [SEED], 0, "train", {"shared": 0})
    old = msgspec.msgpack.encode([unit, [], [], UnitTimings()])
    assert msgspec.msgpack.decode(old, type=CommittedUnit).tool_programs == ToolPrograms()


@pytest.mark.parametrize(
    ("task", "env", "text", "parses"),
    [
        ("planpath", {}, "[U, U, U, U, U, U, U]", True),
        ("planpath", {}, "#### [UP, left]", True),
        ("planpath", {}, "hello world", False),
        ("planpath", {}, "", False),
        ("planpath", {"max_moves": 2}, "[U, D, U]", False),
        ("sudoku", {"size": 4}, "####\n1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1", True),
        ("sudoku", {"size": 4}, "(1, 1, 9)", True),  # out of range: an invalid move, but it parses
        ("sudoku", {"size": 4}, "no grid here", False),
    ],
)
def test_parses_is_the_envs_own_grammar(task, env, text, parses):
    assert printed_answer_parses(task, env, text) is parses
    # The Rust parser agrees: an unparseable answer earns exactly the parse penalty, state unchanged.
    pool = EnvPool(task, 1, **{**env, "parse_penalty": -7.0, "invalid_move_penalty": -0.001})
    obs = pool.reset([0], [SEED], "train").obs[0]
    res = pool.step([0], [text])
    unparsed = res.reward_local[0] == -7.0 and res.obs[0] == obs
    assert unparsed is not parses


def test_the_real_sandbox_gives_the_scripted_verdicts():
    answers, expected = batch(SEED)
    sets = ("task.tool_mode=program", "rollout.k=7", "task.sandbox_timeout_s=1.0")
    assert roll_out(answers, *sets).tool_programs == expected


def test_a_negative_count_from_a_peer_is_an_invalid_message():
    from atgrpo.transport.codec import DEFAULT_MAX_MESSAGE_BYTES, decode, encode
    from atgrpo.transport.errors import InvalidMessage

    good = SampleBatch("a", 0, [], True, tool_programs=ToolPrograms(answers=3, ran=1, crashed=2))
    assert decode(encode(good), max_bytes=DEFAULT_MAX_MESSAGE_BYTES) == good
    hostile = msgspec.structs.replace(good, tool_programs=msgspec.structs.replace(good.tool_programs, crashed=-5))
    with pytest.raises(InvalidMessage, match="tool_programs"):
        decode(encode(hostile), max_bytes=DEFAULT_MAX_MESSAGE_BYTES)
