"""Checkpoint retention: the newest `run.keep_checkpoints` complete checkpoints stay, with `latest` and
the marked ones; nothing goes before a newer one is complete; a removal cut short by a crash is
finished by the next pass, and `latest` loads all along; only rank 0 removes, after the barrier."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from spawned_ranks import spawn_ranks

from atgrpo.config import load_config
from atgrpo.learner import retention
from atgrpo.learner.checkpoints import (
    COMPLETE,
    KEEP,
    RunState,
    latest_checkpoint,
    mark_latest,
    read_state,
    step_folder,
    write_state,
)
from atgrpo.learner.distributed import free_port
from atgrpo.learner.retention import Entry, plan_removal, prune_checkpoints
from atgrpo.learner.trainer import Trainer


def entry(step: int, complete: bool = True, keep: bool = False) -> Entry:
    return Entry(f"step_{step:06d}", step, complete, keep)


def names(*steps: int) -> list[str]:
    return [f"step_{s:06d}" for s in steps]


def test_the_newest_n_complete_checkpoints_stay() -> None:
    found = [entry(s) for s in (20, 40, 60, 80, 100)]
    assert plan_removal(found, "step_000100", 3) == names(20, 40)  # oldest first
    assert plan_removal(found, "step_000100", 1) == names(20, 40, 60, 80)
    assert plan_removal(found, "step_000100", 5) == []
    assert plan_removal(found, "step_000100", 0) == []  # 0: keep all


def test_nothing_goes_before_latest_names_a_complete_checkpoint() -> None:
    found = [entry(s) for s in (20, 40, 60)]
    assert plan_removal(found, None, 1) == []
    assert plan_removal(found, "step_000999", 1) == []  # `latest` names a folder not listed


def test_latest_and_marked_checkpoints_stay() -> None:
    found = [entry(20, keep=True), entry(40), entry(60), entry(80), entry(100, complete=False)]
    # `latest` stays even without COMPLETE (older runs' checkpoints have only the link).
    assert plan_removal(found, "step_000100", 1) == names(40, 60, 80)
    assert plan_removal(found, "step_000100", 1, keep_steps={60}) == names(40, 80)
    # A marked checkpoint among the newest counts as one of them.
    assert plan_removal([entry(20), entry(40, keep=True), entry(60)], "step_000060", 2) == names(20)


def test_incomplete_and_newer_folders_are_neither_counted_nor_removed() -> None:
    found = [entry(20), entry(30, complete=False), entry(40), entry(50, complete=False), entry(60), entry(80)]
    # 30 and 50: half-written (crashed writes); 80: complete but newer than `latest` (a crash between
    # COMPLETE and the link), written again by the resumed run.
    assert plan_removal(found, "step_000060", 2) == names(20)
    assert plan_removal(found, "step_000060", 1) == names(20, 40)


def make_checkpoint(root: Path, step: int, *, files: int = 3, complete: bool = True) -> Path:
    """A stand-in checkpoint: a loadable run state and a few weight files; marked the latest if complete."""
    folder = step_folder(root, step)
    (folder / "shared").mkdir(parents=True)
    for i in range(files):
        (folder / "shared" / f"part{i}.bin").write_bytes(bytes(1000))
    write_state(folder, RunState(step, {"shared": step}, 0.5))
    if complete:
        mark_latest(folder)
    return folder


def listing(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_prune_keeps_the_newest_latest_and_marked_ones(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        make_checkpoint(tmp_path, step)
    (step_folder(tmp_path, 1) / KEEP).touch()
    make_checkpoint(tmp_path, 5, complete=False)  # being written: after `latest`, not touched
    assert prune_checkpoints(tmp_path, 1, keep_steps=[2]) == names(3)
    assert listing(tmp_path) == ["latest", *names(1, 2, 4, 5)]
    assert prune_checkpoints(tmp_path, 1, keep_steps=[2]) == []  # idempotent


def test_a_crash_in_the_middle_of_a_removal_is_finished_by_the_next_pass(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for step in (1, 2, 3):
        make_checkpoint(tmp_path, step, files=20)
    real_rmtree = shutil.rmtree

    def crash_halfway(path, *args, **kwargs):
        parts = sorted((Path(path) / "shared").iterdir())
        for part in parts[: len(parts) // 2]:
            part.unlink()
        raise OSError(f"crashed removing {path}")

    monkeypatch.setattr(retention.shutil, "rmtree", crash_halfway)
    with pytest.raises(OSError, match="crashed removing"):
        prune_checkpoints(tmp_path, 2)
    # Step 1 is out of the checkpoints' namespace, half gone; `latest` and step 2 are whole.
    assert listing(tmp_path) == [".step_000001.deleting", "latest", *names(2, 3)]
    assert latest_checkpoint(tmp_path) == step_folder(tmp_path, 3)
    assert read_state(latest_checkpoint(tmp_path)) == RunState(3, {"shared": 3}, 0.5)

    # The resumed run writes step 4; its pass removes the leftover and step 2.
    monkeypatch.setattr(retention.shutil, "rmtree", real_rmtree)
    make_checkpoint(tmp_path, 4)
    assert prune_checkpoints(tmp_path, 2) == names(2)
    assert listing(tmp_path) == ["latest", *names(3, 4)]
    assert read_state(latest_checkpoint(tmp_path)) == RunState(4, {"shared": 4}, 0.5)


def test_a_crash_before_the_link_moves_keeps_everything(tmp_path: Path) -> None:
    """Killed after COMPLETE but before `latest` moved: nothing may go, the run resumes from 2."""
    for step in (1, 2):
        make_checkpoint(tmp_path, step)
    third = make_checkpoint(tmp_path, 3, complete=False)
    (third / COMPLETE).touch()
    assert prune_checkpoints(tmp_path, 1) == names(1)
    assert listing(tmp_path) == ["latest", *names(2, 3)]
    assert latest_checkpoint(tmp_path) == step_folder(tmp_path, 2)


class StubTrainer:
    """What `Trainer.checkpoint` uses of a trainer: its config, world size and `save`; records the order
    of events, with the barrier (patched) among them."""

    checkpoint = Trainer.checkpoint

    def __init__(self, cfg, world: int, events: list[str], rank: int = 0, delay_s: float = 0.0) -> None:
        self.cfg, self.world, self.events, self.rank, self.delay_s = cfg, world, events, rank, delay_s

    def save(self, folder: Path, state: RunState | None, extra=None) -> None:
        self.events.append("save")
        time.sleep(self.delay_s)
        (folder / "shared").mkdir(parents=True, exist_ok=True)
        (folder / "shared" / f"rank{self.rank}.pt").write_bytes(bytes(100))
        if state is not None:
            write_state(folder, state)


@pytest.mark.parametrize("rank0", [True, False])
def test_only_rank_0_removes_and_only_after_the_barrier(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rank0: bool,
) -> None:
    from atgrpo.learner import trainer

    root = tmp_path / "checkpoints"
    for step in (1, 2):
        make_checkpoint(root, step)
    events: list[str] = []
    monkeypatch.setattr(trainer.dist, "barrier", lambda: events.append("barrier"))
    monkeypatch.setattr(trainer, "mark_latest", lambda folder: (events.append("mark"), mark_latest(folder)))
    monkeypatch.setattr(trainer, "prune_checkpoints", lambda *a: (events.append("prune"), prune_checkpoints(*a))[1])
    cfg = load_config(None, [f'run.out_dir="{tmp_path}"', "run.keep_checkpoints=2"])
    if not rank0:  # rank 0 wrote its part and state; this rank writes only its own part
        step_folder(root, 3).mkdir()
        write_state(step_folder(root, 3), RunState(3, {"shared": 3}, 0.5))
    StubTrainer(cfg, 2, events).checkpoint(root, RunState(3, {"shared": 3}, 0.5), rank0=rank0)
    if rank0:
        assert events == ["save", "barrier", "mark", "prune"]
        assert listing(root) == ["latest", *names(2, 3)]
    else:
        assert events == ["save", "barrier"]
        assert listing(root) == ["latest", *names(1, 2, 3)]


def _rank_main(rank: int, port: int, out: str, failures) -> None:
    from atgrpo.learner import trainer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        root = Path(out) / "checkpoints"
        real = trainer.prune_checkpoints

        def prune(where, *args):
            # rank 1 writes its part a second late: rank 0 must not get here before it is on disk
            assert (step_folder(where, 3) / "shared" / "rank1.pt").is_file(), (
                "pruned before every rank's part was written"
            )
            return real(where, *args)

        trainer.prune_checkpoints = prune
        cfg = load_config(None, [f'run.out_dir="{out}"', "run.keep_checkpoints=1"])
        StubTrainer(cfg, 2, [], rank, delay_s=1.0 if rank == 1 else 0.0).checkpoint(
            root, RunState(3, {"shared": 3}, 0.5), rank0=rank == 0
        )
        torch.distributed.barrier()
        assert listing(root) == ["latest", "step_000003"]
    except BaseException as exc:  # reported to the test process
        failures.put(f"rank {rank}: {type(exc).__name__}: {exc}")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.integration
def test_two_ranks_over_gloo_remove_once_every_part_is_written(tmp_path: Path) -> None:
    for step in (1, 2):
        make_checkpoint(tmp_path / "checkpoints", step)
    spawn_ranks(_rank_main, 2, free_port(), str(tmp_path))


def test_a_failed_removal_does_not_fail_the_checkpoint(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = tmp_path / "checkpoints"
    make_checkpoint(root, 1)

    def refuse(*_args):
        raise PermissionError("read-only")

    monkeypatch.setattr(retention.shutil, "rmtree", refuse)
    cfg = load_config(None, [f'run.out_dir="{tmp_path}"', "run.keep_checkpoints=1"])
    with caplog.at_level("ERROR", logger="atgrpo.learner"):
        folder = StubTrainer(cfg, 1, []).checkpoint(root, RunState(2, {"shared": 2}, 0.5), rank0=True)
    assert latest_checkpoint(root) == folder and (folder / COMPLETE).is_file()
    assert "could not remove old checkpoints" in caplog.text and "read-only" in caplog.text


def test_the_retention_config() -> None:
    run = load_config(None, []).run
    assert run.keep_checkpoints == 3 and run.keep_checkpoint_steps == []
    for bad in ("run.keep_checkpoints=-1", "run.keep_checkpoint_steps=[-20]"):
        with pytest.raises(ValidationError):
            load_config(None, [bad])
