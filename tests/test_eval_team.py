"""`atgrpo-eval --team` and `--transcripts`: a math team of 2 reasoners, 1 tool agent and a judge on the
shipped problems with a scripted engine (what each agent says is known), and argument checking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atgrpo.cli import eval as eval_cli
from atgrpo.cli.eval import EvalError, parse_team
from atgrpo.config import TinyModelSpec
from atgrpo.engines import torch_engine
from atgrpo.models import build_tiny_model
from tests.workflows.scripted import ScriptedEngine

SPEC = TinyModelSpec(
    hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, max_positions=1024
)
SCRIPT = {"T:": "```python\nprint(24 - 18)\n```", "R:": "so \\boxed{6}", "J:": "\\boxed{6}"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(SPEC, tmp_path_factory.mktemp("models") / "tiny")


def test_team_spec():
    assert parse_team("reasoner=3, tool=1,judge=1") == {"reasoner": 3, "tool": 1, "judge": 1}
    for bad in ["reasoner", "reasoner=x", "reasoner=1,reasoner=2", "=2", ""]:
        with pytest.raises(EvalError):
            parse_team(bad)


def test_bad_team_arguments_exit_2(tiny, capsys):
    for argv in (
        ["--task", "math", "--model", str(tiny), "--team", "reasoner=2,judge=2"],
        ["--task", "math", "--model", str(tiny), "--team", "reasoner=2", "--roles", "reasoner"],
        ["--task", "code", "--model", str(tiny), "--team", "coder=2"],
        ["--task", "math", "--model", str(tiny), "--team", "reasoner=2", "--role-model", f"reasoner_3={tiny}"],
    ):
        assert eval_cli.main(argv) == 2, argv
        assert "atgrpo-eval:" in capsys.readouterr().err


def test_team_eval_writes_every_agents_turns_and_the_verdict(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(
        torch_engine,
        "TorchEngine",
        lambda model, policy, **kw: ScriptedEngine(lambda t, i: SCRIPT[t.rstrip()[-2:]], policy),
    )
    out, log = tmp_path / "res.json", tmp_path / "t" / "team.jsonl"
    argv = [
        "--task",
        "math",
        "--model",
        str(tiny),
        "--team",
        "reasoner=2,tool=1,judge=1",
        "--limit",
        "2",
        "--turns",
        "2",
        "--max-new-tokens",
        "64",
        "--role-model",
        f"reasoner_2={tiny}",
        "--out",
        str(out),
        "--transcripts",
        str(log),
    ]
    assert eval_cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["agents"] == ["tool", "reasoner_1", "reasoner_2", "judge"] and res["roles"] == [
        "tool",
        "reasoner",
        "judge",
    ]
    assert [p["correct"] for p in res["per_problem"]] == [1, 0]  # m01's answer is 6, m02's is 72
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["id"], r["sample"], r["correct"], r["final_answer"]) for r in rows] == [
        ("m01", 0, True, "6"),
        ("m02", 0, False, "6"),
    ]
    first = rows[0]
    assert first["gold"] == "6" and first["question"].startswith("A baker makes 24 muffins")
    # The agents agree in turn 1, so one judge step ends the episode; m02 likewise (on a wrong answer).
    assert [(t["turn"], t["agent"]) for t in first["turns"]] == [
        (0, "tool"),
        (0, "reasoner_1"),
        (0, "reasoner_2"),
        (0, "judge"),
    ]
    tool, judge = first["turns"][0], first["turns"][3]
    assert (
        tool["program"] == "print(24 - 18)"
        and tool["output"].strip() == "6"
        and tool["answer"] == "6"
        and tool["correct"]
    )
    assert judge == {
        "turn": 0,
        "agent": "judge",
        "text": "\\boxed{6}",
        "answer": "6",
        "correct": True,
        "team_answer": "6",
        "agree": True,
    }
    assert first["turns_used"] == 1


def test_code_transcripts_keep_the_program_and_its_pass_rate(tiny, tmp_path, monkeypatch):
    good = "```python\ndef sum_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n```"
    monkeypatch.setattr(
        torch_engine, "TorchEngine", lambda model, policy, **kw: ScriptedEngine(lambda t, i: good, policy)
    )
    log = tmp_path / "code.jsonl"
    argv = [
        "--task",
        "code",
        "--model",
        str(tiny),
        "--roles",
        "coder",
        "--limit",
        "1",
        "--max-new-tokens",
        "96",
        "--transcripts",
        str(log),
    ]
    assert eval_cli.main(argv) == 0
    (row,) = [json.loads(line) for line in log.read_text().splitlines()]
    (turn,) = row["turns"]
    assert row["id"] == "fn-sum-evens" and row["correct"] and turn["agent"] == "coder" and turn["text"] == good
    assert "def sum_evens" in turn["program"] and turn["pass_rate"] == 1.0 and turn["tests"] == []
