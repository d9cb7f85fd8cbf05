"""Every published learning table is rebuilt from its stored data (docs/results/*.json) and must be
the text in README.md and docs/: a table can never drift from its data, and no table of the suites'
format is published without data. Also: the stored files round-trip, and `atgrpo-bench learning
report` prints what `render` makes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from atgrpo.bench.learning import cli
from atgrpo.bench.learning.results import StoredArm, StoredRun, StoredTable, dump, load, render, render_summary

ROOT = Path(__file__).resolve().parents[3]
STORED = sorted((ROOT / "docs" / "results").glob("*.json"))
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
HEADER = "| arm | seeds | final | min | max | per seed |"
"""The first cells of a suite's full table (`render`)."""
SHORT_HEADER = "| arm | seeds | final | gain | late | final − "
"""The first cells of the short form (`render_summary`, README)."""


def _texts() -> dict[Path, str]:
    return {page: page.read_text() for page in PAGES}


def test_there_is_stored_data() -> None:
    assert len(STORED) >= 8, STORED


@pytest.mark.parametrize("file", STORED, ids=lambda p: p.stem)
def test_each_stored_table_is_published_as_its_data_renders_it(file: Path) -> None:
    table = load(file)
    assert table.name == file.stem
    text = render(table, f"docs/results/{file.name}")
    assert any(text in page for page in _texts().values()), f"no page holds the table rebuilt from {file}:\n{text}"


@pytest.mark.parametrize("file", STORED, ids=lambda p: p.stem)
def test_stored_files_round_trip(file: Path, tmp_path: Path) -> None:
    dump(load(file), tmp_path / file.name)
    assert (tmp_path / file.name).read_text() == file.read_text()


def test_every_published_suite_table_comes_from_stored_data() -> None:
    rendered = [render(load(f), f"docs/results/{f.name}") for f in STORED]
    short = [render_summary(load(f), f"docs/results/{f.name}") for f in STORED]
    for page, text in _texts().items():
        for header, made in ((HEADER, rendered), (SHORT_HEADER, short)):
            start = 0
            while (at := text.find(header, start)) >= 0:
                assert any(text.startswith(block, at) for block in made), (
                    f"{page.name}: a learning table at offset {at} is not rebuilt from docs/results/ "
                    f"(atgrpo-bench learning report prints what it should be)"
                )
                start = at + 1


def test_the_report_command_prints_the_rendered_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["report", "ordering", "--out", str(tmp_path)]) == 0
    text = render(load(ROOT / "docs/results/ordering.json"), "docs/results/ordering.json")
    assert text in capsys.readouterr().out
    assert (tmp_path / "ordering.md").read_text() == text
    assert cli.main(["report", "nonesuch"]) == 1


def _run(start: float, final: float, late: float, session: str = "s", minutes: float = 10.0) -> StoredRun:
    curve = [(0, 0.0, start), (10, minutes, final)]
    return StoredRun(
        start=start, final=final, steps=10, late=late, curve=curve, rl_min=minutes, cpu="cpu", cores=2, session=session
    )


def test_render_arithmetic_provenance_and_timing() -> None:
    arms = {
        "ref": StoredArm({0: _run(0.1, 0.5, 0.5), 1: _run(0.2, 0.6, 0.6)}),
        "other": StoredArm({0: _run(0.1, 0.2, 0.2), 1: _run(0.2, 0.4, 0.4)}, provenance="ran on another day"),
    }
    table = StoredTable(name="t", suite="s", reference="ref", command="c", source="made here", arms=arms)
    text = render(table, "t.json")
    # One session, one machine: RL minutes and the equal-wall-time line are shown.
    assert (
        "| ref | 2 | 55.0 ± 7.1 | 50.0 | 60.0 | 50.0, 60.0 | 40.0 ± 0.0 | 40.0 | 40.0 | 40.0, 40.0 | 10 | 10.0 |"
        in text
    )
    assert "| other [1] | 2 |" in text and "- [1] ran on another day" in text
    assert "| other | 2 | -25.0 ± 7.1 | separate |" in text  # paired: diffs -0.3, -0.2
    assert "Equal wall time" in text
    # Another session for one run: the minutes would compare sittings, so they go.
    arms["other"].runs[1] = _run(0.2, 0.4, 0.4, session="later")
    text = render(table, "t.json")
    assert "| RL min |" not in text and "Equal wall time" not in text and "not compared" in text
    # A late mean not kept per seed is n/a, never a number.
    arms["other"].runs[1].late = None
    assert "| n/a | n/a |" in render(table, "t.json") and "not kept per seed" in render(table, "t.json")
    assert math.isclose(arms["ref"].runs[0].gain, 0.4)
