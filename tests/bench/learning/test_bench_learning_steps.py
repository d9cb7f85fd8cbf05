"""`atgrpo-bench learning steps`: the medians of a run's step phases from its metrics.jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from atgrpo.bench.learning import cli
from atgrpo.bench.learning.steps import step_times


def _write(run: Path, rows: list[dict]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def _step(step: int, step_s: float, generate_s: float, learner_s: float) -> dict:
    return {
        "step": step,
        "rollout/samples": 64,
        "time/step_s": step_s,
        "time/actor_generate_s": generate_s,
        "time/learner_s": learner_s,
        "time/actor_idle_s": step_s - generate_s,
    }


def test_medians_leave_out_the_first_step_and_count_a_repeated_step_once(tmp_path: Path) -> None:
    rows = [
        {"step": 0, "eval/success": 0.1, "time/eval_s": 30.0},  # an evaluation's row: not a step
        _step(1, 100.0, 90.0, 10.0),  # the engine's start: left out of the medians
        _step(2, 30.0, 20.0, 10.0),
        _step(3, 50.0, 40.0, 12.0),  # cut off, then done again after a resume: the last row counts
        _step(4, 20.0, 12.0, 6.0),
        _step(3, 40.0, 30.0, 8.0),
    ]
    got = step_times(_write(tmp_path / "run", rows))
    assert got["steps"] == 4
    assert (got["step_s"], got["generate_s"], got["learner_s"], got["actor_idle_s"]) == (30.0, 20.0, 8.0, 10.0)


def test_a_phase_no_row_logged_is_nan_not_zero(tmp_path: Path) -> None:
    rows = [{k: v for k, v in _step(s, 10.0, 5.0, 4.0).items() if k != "time/actor_idle_s"} for s in (1, 2)]
    got = step_times(_write(tmp_path / "run", rows))
    assert got["step_s"] == 10.0 and math.isnan(got["actor_idle_s"])


def test_the_command_prints_a_table_writes_json_and_refuses_what_is_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _write(tmp_path / "a", [_step(1, 9.0, 5.0, 3.0), _step(2, 7.0, 4.0, 2.0), _step(3, 5.0, 2.0, 2.0)])
    assert cli.main(["steps", str(run), "--json", str(tmp_path / "out.json")]) == 0
    assert f"| {run} | 3 | 6.0 | 3.0 | 2.0 | 3.0 |" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())[str(run)]["step_s"] == 6.0
    assert cli.main(["steps", str(tmp_path / "nothing")]) == 1
    assert "no metrics.jsonl" in capsys.readouterr().err
    _write(tmp_path / "empty", [{"step": 0, "eval/success": 0.0}])
    assert cli.main(["steps", str(tmp_path / "empty")]) == 1
    assert "no training step" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"step": 2, "rollout/samples": ', "not JSON"),
        ("[1, 2]", "not a metrics row"),
        ('{"time": 3.0}', "not a metrics row"),
    ],
)
def test_a_damaged_line_is_named_by_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, why: str
) -> None:
    run = _write(tmp_path / "run", [_step(1, 9.0, 5.0, 3.0)])
    with open(run / "metrics.jsonl", "a") as f:
        f.write(line + "\n")
    with pytest.raises(ValueError, match=f"metrics.jsonl:2: {why}"):
        step_times(run)
    assert cli.main(["steps", str(run)]) == 1
    assert f"{run / 'metrics.jsonl'}:2: {why}" in capsys.readouterr().err
