"""`atgrpo-train` with `transport.weights_store`: the tiny demo end to end, its actors taking every
version from the store (the hub serves no weights), the learner writing each version there once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from systest_util import read_rows, run_train, tiny_sets

from atgrpo.learner.job import STORE_SESSION
from atgrpo.transport.weight_store import MARKER

pytestmark = pytest.mark.integration


def test_tiny_run_takes_its_weights_from_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    out = tmp_path / "out"
    run = run_train(
        out,
        tiny_sets(
            out,
            run__steps=2,
            run__name='"store-run"',
            transport__weights_store=json.dumps(str(store)),
        ),
    )
    assert run.returncode == 0, run.output[-4000:]
    rows = [r for r in read_rows(out / "metrics.jsonl") if "hub/weights_store_versions" in r]
    assert rows, "no hub metrics written"
    last = rows[-1]
    # Version 0 (after the warm start) and one per step were written; not one weights reply was served.
    assert last["hub/weights_store_versions"] >= 2
    assert last["transport/weights_replies"] == 0
    assert last.get("hub/weights_store_failed", 0) == 0
    sessions = list((store / "store-run").iterdir())  # one learner session, one run nonce
    assert len(sessions) == 1 and (out / STORE_SESSION).read_text().strip() == sessions[0].name
    held = [d for d in (sessions[0] / "shared").iterdir() if not d.name.startswith(".")]
    assert held and all((d / MARKER).is_file() for d in held)
