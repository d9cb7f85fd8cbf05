"""`atgrpo-eval`: pass@k estimator, argument checking, and runs on a tiny local model folder."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest

from atgrpo.cli import eval as eval_cli
from atgrpo.cli.eval import EvalError, ks_of, pass_at_k
from atgrpo.config import TinyModelSpec, load_config
from atgrpo.engines import torch_engine
from atgrpo.envs import EnvPool
from atgrpo.models import build_tiny_model
from atgrpo.workflows.games import GameWorkflow
from tests.workflows.scripted import ScriptedEngine

SPEC = TinyModelSpec(
    hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, max_positions=1024
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(SPEC, tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="module")
def tiny2(tmp_path_factory) -> Path:
    return build_tiny_model(SPEC.model_copy(update={"seed": 1}), tmp_path_factory.mktemp("models") / "tiny2")


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c correct) containing at least one correct sample."""
    subsets = list(combinations([True] * c + [False] * (n - c), k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_pass_at_k_is_the_unbiased_estimator():
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k))
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(200, 0, 100) == 0.0 and pass_at_k(200, 101, 100) == 1.0
    assert pass_at_k(100, 50, 10) == pytest.approx(1 - math.comb(50, 10) / math.comb(100, 10))
    for bad in [(3, 4, 1), (3, 1, 4), (3, 1, 0), (0, 0, 1), (3, -1, 1)]:
        with pytest.raises(EvalError):
            pass_at_k(*bad)


def test_k_values_are_checked():
    assert ks_of(None, 5) == [1, 5] and ks_of(None, 1) == [1] and ks_of("3,1,3", 4) == [1, 3]
    for bad in ["0", "6", "a", ""]:
        with pytest.raises(EvalError):
            ks_of(bad, 5)


def test_bad_arguments_exit_2_with_a_message(tiny, tmp_path, capsys):
    cases = [
        ["--task", "code"],  # no model
        ["--task", "code", "--model", str(tmp_path / "missing")],
        ["--task", "code", "--model", str(tiny), "--role-model", "judge=" + str(tiny)],
        ["--task", "code", "--model", str(tiny), "--roles", "tester"],
        ["--task", "math", "--model", str(tiny), "--dataset", str(tmp_path / "none.jsonl")],
        ["--task", "code", "--model", str(tiny), "--samples", "2", "--k", "3"],
        ["--task", "code", "--model", str(tiny), "--samples", "0"],
        ["--task", "code", "--model", str(tiny), "--top-p", "0"],
        ["--task", "code", "--model", str(tiny), "--top-p", "1.5"],
    ]
    for argv in cases:
        assert eval_cli.main(argv) == 2, argv
        assert "atgrpo-eval:" in capsys.readouterr().err


def test_greedy_code_eval_on_a_tiny_model_writes_json(tiny, tmp_path, capsys):
    out = tmp_path / "res.json"
    argv = [
        "--task",
        "code",
        "--model",
        str(tiny),
        "--roles",
        "coder",
        "--limit",
        "2",
        "--max-new-tokens",
        "6",
        "--out",
        str(out),
    ]
    assert eval_cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["task"] == "code" and res["roles"] == ["coder"] and res["problems"] == 2
    assert res["decoding"] == "greedy" and res["samples_per_problem"] == 1
    assert set(res["pass_at_k"]) == {"1"} and 0.0 <= res["accuracy"] <= 1.0
    assert [p["id"] for p in res["per_problem"]] == ["fn-sum-evens", "fn-anagram"]
    assert "accuracy" in capsys.readouterr().out


def test_multi_agent_sampled_eval_with_a_model_per_role(tiny, tiny2, tmp_path):
    out = tmp_path / "res.json"
    argv = [
        "--task",
        "planpath",
        "--model",
        str(tiny),
        "--role-model",
        f"tool={tiny2}",
        "--seeds",
        "2",
        "--samples",
        "3",
        "--k",
        "1,3",
        "--temperature",
        "1.0",
        "--max-new-tokens",
        "6",
        "--out",
        str(out),
    ]
    assert eval_cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["models"] == {"tool": str(tiny2), "plan": str(tiny)}
    assert res["decoding"] == "sampled" and set(res["pass_at_k"]) == {"1", "3"}
    assert all(p["samples"] == 3 and 0 <= p["correct"] <= 3 for p in res["per_problem"])


def test_accuracy_and_pass_at_k_count_successes(tiny, tmp_path, monkeypatch):
    """With an engine that answers right on even branches only: accuracy 1/2, pass@2 = 1 - 1/6."""
    good = "```python\ndef sum_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n```"
    monkeypatch.setattr(
        torch_engine,
        "TorchEngine",
        lambda model, policy, **kw: ScriptedEngine(lambda t, i: good if i % 2 == 0 else "x", policy),
    )
    out = tmp_path / "res.json"
    argv = [
        "--task",
        "code",
        "--model",
        str(tiny),
        "--roles",
        "coder",
        "--limit",
        "1",
        "--samples",
        "4",
        "--k",
        "1,2,4",
        "--out",
        str(out),
    ]
    assert eval_cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["per_problem"] == [{"id": "fn-sum-evens", "correct": 2, "samples": 4}]
    assert res["accuracy"] == pytest.approx(0.5)
    assert res["pass_at_k"] == pytest.approx({"1": 0.5, "2": 1 - 1 / 6, "4": 1.0})


@pytest.mark.parametrize(
    ("sets", "flag", "want"),
    [
        ([], [], "float32"),
        (['rollout.dtype="bfloat16"'], [], "bfloat16"),  # the config's rollout dtype
        (['train.dtype="bfloat16"'], [], "bfloat16"),  # else its train dtype, as in training
        (['rollout.dtype="bfloat16"'], ["--dtype", "float32"], "float32"),  # the flag wins
    ],
)
def test_the_engines_dtype_is_the_configs_unless_given(tiny, tmp_path, monkeypatch, sets, flag, want):
    seen = []

    def engine(model, policy, **kw):
        seen.append(str(next(model.parameters()).dtype).removeprefix("torch."))
        return ScriptedEngine(lambda t, i: "x", policy)

    monkeypatch.setattr(torch_engine, "TorchEngine", engine)
    argv = [
        "--task",
        "code",
        "--model",
        str(tiny),
        "--roles",
        "coder",
        "--limit",
        "1",
        *flag,
        *(a for s in sets for a in ("--set", s)),
    ]
    assert eval_cli.main(argv) == 0
    assert seen == [want]


@pytest.mark.integration
def test_cli_subprocess_smoke(tiny, tmp_path):
    out = tmp_path / "res.json"
    cmd = [
        sys.executable,
        "-m",
        "atgrpo.cli.eval",
        "--task",
        "math",
        "--roles",
        "reasoner",
        "--model",
        str(tiny),
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "pass@1" in proc.stdout and json.loads(out.read_text())["problems"] == 1


@pytest.mark.parametrize(("turns", "revisits"), [(4, True), (1, False)])
def test_games_count_the_failures_that_came_back_to_a_state(tiny, tmp_path, monkeypatch, capsys, turns, revisits):
    """A plan agent that answers "[U,D]" every turn stands, after its second turn at the latest, where it
    stood before (U then D undo each other, or U is blocked and D then U, D shuttle): with 4 turns every
    failed episode came back to a state, and with one turn none can."""
    monkeypatch.setattr(
        torch_engine, "TorchEngine", lambda model, policy, **kw: ScriptedEngine(lambda t, i: "[U,D]", policy)
    )
    out, log = tmp_path / "res.json", tmp_path / "t.jsonl"
    argv = [
        "--task",
        "planpath",
        "--roles",
        "plan",
        "--model",
        str(tiny),
        "--seeds",
        "12",
        "--turns",
        str(turns),
        "--out",
        str(out),
        "--transcripts",
        str(log),
    ]
    assert eval_cli.main(argv) == 0
    res = json.loads(out.read_text())
    failed = [r for r in map(json.loads, log.read_text().splitlines()) if not r["correct"]]
    assert failed and res["problems"] - res["solved"] == len(failed)
    assert res["failed_revisiting"] == (len(failed) if revisits else 0)
    assert f"{res['failed_revisiting']} of {len(failed)} failed episodes came back" in capsys.readouterr().out
    # Each row's observation is the state the agent was shown: the first is the level as reset.
    pool = EnvPool("planpath", 1, **GameWorkflow(load_config(None, [])).env_config)
    for r in failed:
        assert r["turns"][0]["obs"] == pool.reset([0], [int(r["id"].removeprefix("seed-"))], "eval").obs[0]
