"""The learner job: wiring of one learner rank, and the loop over training steps.

Rank 0 owns the hub (actors, versions, units), the orchestrator (the data cursor, advantages,
packing, evaluations), the metrics and all run files; every rank owns a `Trainer`. Per step:
rank 0 plans as the step's units come in (`Orchestrator.step_plans`) and every rank trains each
plan as it is sent (streamed chunks are accumulated; the final plan steps the optimizers), then
rank 0 publishes the new weights and writes metrics; checkpoints are written by all ranks
together, with the units of later steps already in (`UNTAKEN_UNITS`), which a resume hands back. The loop stops after `run.steps`,
at `run.time_limit_s`, or on SIGINT/SIGTERM (after the current step: checkpoint, final
evaluation, actors told to shut down).

Events for the launcher (`messages.LearnerEvent`) go to stdout as JSON lines; logs go to stderr.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
import torch

from atgrpo.config import RunConfig
from atgrpo.devices import activate, collective_backend, resolve_device
from atgrpo.learner import distributed
from atgrpo.learner.checkpoints import (
    RunState,
    check_and_write_config,
    latest_checkpoint,
)
from atgrpo.learner.hub import CommittedUnit, Hub
from atgrpo.learner.intake import IntakeLimits, PolicyLimits
from atgrpo.learner.ledger import VersionLedger
from atgrpo.learner.orchestrator import Orchestrator, rollout_metrics
from atgrpo.learner.packing import broadcast_flag, scatter_plans
from atgrpo.learner.preflight import check_learner_inputs
from atgrpo.learner.signal_watch import SignalWatch
from atgrpo.learner.trainer import Trainer
from atgrpo.messages import (
    EvalSummary,
    Failed,
    HubReady,
    LearnerEvent,
    Notice,
    Resumed,
    RunSummary,
    Stopping,
    WarmStartProgress,
)
from atgrpo.metrics import MetricsWriter, plot_learning_curve
from atgrpo.models.folder import load_tokenizer, model_facts
from atgrpo.paths import checkpoints_dir, out_dir, policy_dir
from atgrpo.placement import pin
from atgrpo.transport.endpoints import HubEndpoint, private_ipc_address
from atgrpo.transport.security import require_keys
from atgrpo.transport.store_writer import StoreWriter
from atgrpo.transport.weight_store import WeightStore, check_nonce, new_run_nonce

log = logging.getLogger("atgrpo.learner")

Prepare = Callable[[RunConfig, Callable[[str, int, int, float], None], torch.device], None]
"""Makes every policy's initial model folder on rank 0 (`atgrpo.warmstart.prepare.prepare_models`),
warm-starting on the rank's device and reporting (policy, step, steps, loss)."""


def emit(event: LearnerEvent) -> None:
    sys.stdout.write(msgspec.json.encode(event).decode() + "\n")
    sys.stdout.flush()


def run_learner(cfg: RunConfig, address: str | None, prepare: Prepare) -> RunSummary | None:
    """Run the learner job of `cfg` on this rank; rank 0 returns the run's summary."""
    try:
        return _run(cfg, address, prepare)
    except BaseException as exc:
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            emit(Failed(f"{type(exc).__name__}: {exc}"))
        raise


UNTAKEN_UNITS = "untaken_units.msgpack"
"""Checkpoint file (rank 0): the committed units of steps not trained yet (`Hub.untaken`), so a
pipelined run that resumes neither rolls them out again nor loses them."""


def _run(cfg: RunConfig, address: str | None, prepare: Prepare) -> RunSummary | None:
    job = distributed.dist_env()
    # The address, the keys and the model folders, before the warm start's minutes and the ranks' join.
    check_learner_inputs(cfg, address, hub=job.rank == 0)
    cores = pin(cfg.launch.learner_cpus, "launch.learner_cpus")
    threads = cfg.launch.learner_threads or cores
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(cfg.run.seed)
    device = resolve_device(cfg.train.device, local_rank=job.local_rank, world_size=job.world_size)
    activate(device)
    rank, world = 0, 1
    if distributed.launched() or cfg.train.backend == "deepspeed":
        env = distributed.init_distributed_from_env(
            collective_backend(device), timeout_s=distributed.group_timeout_s(cfg.transport.round_timeout_s)
        )
        rank, world = env.rank, env.world_size
    checkpoint = latest_checkpoint(checkpoints_dir(cfg)) if cfg.run.resume else None
    if rank == 0:
        check_and_write_config(cfg, out_dir(cfg), resuming=checkpoint is not None)
        prepare(cfg, lambda p, step, steps, loss: emit(WarmStartProgress(p, step, steps, loss)), device)
    if world > 1:
        torch.distributed.barrier()

    stop = threading.Event()

    def on_signal(signum, _frame):
        log.warning("signal %d: stopping after the current step", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    trainer = Trainer(cfg, rank, world, device)
    state = RunState(0, dict(trainer.versions), None)
    if checkpoint is not None:
        state = trainer.load(checkpoint)
        log.info("resumed from %s at step %d, versions %s", checkpoint, state.step, state.versions)
        if rank == 0:
            emit(Resumed(str(checkpoint), state.step))
    if rank != 0:
        _train_loop(cfg, trainer, state, None, stop)
        return None
    tp = cfg.transport
    bind = address or tp.endpoint or private_ipc_address(out_dir(cfg) / "ipc")
    require_keys(bind, tp.curve_keys, tp.insecure, "hub")
    endpoint = HubEndpoint(bind, max_message_bytes=tp.max_message_bytes, curve_keys=tp.curve_keys)
    ledger = VersionLedger(cfg.run.name, dict(state.versions), cfg.train.max_staleness)
    store = _weight_store(cfg)
    hub = Hub(
        endpoint,
        ledger,
        limits=intake_limits(cfg, trainer),
        unit_timeout_s=cfg.transport.unit_timeout_s,
        keep_versions=cfg.train.max_staleness + 1,
        store=store,
    )
    hub.start()
    emit(HubReady(hub.endpoint.address))
    restored = _read_untaken(checkpoint) if checkpoint is not None else []
    rank0 = _Rank0(cfg, hub, Orchestrator(cfg, hub, trainer.pad_ids, world, restored))
    try:
        summary = _train_loop(cfg, trainer, state, rank0, stop)
    finally:
        hub.stop("training finished")
        rank0.metrics.close()
    assert summary is not None
    png = plot_learning_curve(out_dir(cfg) / "metrics.jsonl", out_dir(cfg) / "learning_curve.png", title=cfg.run.name)
    summary.learning_curve = str(png)
    start, end, gain = summary.eval_start, summary.eval_end, summary.improvement_points
    if start is not None and end is not None and gain is not None:
        log.info("held-out success: %.1f%% -> %.1f%% (%+.1f points)", 100 * start, 100 * end, gain)
    (out_dir(cfg) / "eval.json").write_bytes(msgspec.json.format(msgspec.json.encode(summary), indent=2))
    emit(summary)
    return summary


STORE_SESSION = "weights_store_session"
"""out_dir file: the run nonce of the last learner session that wrote to `transport.weights_store`,
whose folder the next session (a resume, a restart) removes; never another out_dir's session."""


def _weight_store(cfg: RunConfig) -> StoreWriter | None:
    """This learner session's weight store (`transport.weights_store`), written in the background:
    under a fresh run nonce (`transport.weight_store`: a resume's versions are not the earlier
    session's), with the earlier session's folder of this out_dir removed."""
    tp = cfg.transport
    if not tp.weights_store:
        return None
    record = out_dir(cfg) / STORE_SESSION
    previous = record.read_text().strip() if record.is_file() else None
    try:
        previous = check_nonce(previous) if previous else None
    except ValueError:
        log.warning("weight store: %s holds no run nonce; the earlier session's folder is left", record)
        previous = None
    nonce = new_run_nonce()
    store = WeightStore(tp.weights_store, cfg.run.name, cfg.train.max_staleness + 2, run_nonce=nonce, replaces=previous)
    record.write_text(nonce + "\n")
    log.info("weight store: this session writes to %s", store.session)
    return StoreWriter(store)


def intake_limits(cfg: RunConfig, trainer: Trainer) -> IntakeLimits:
    """What the hub checks samples against: the config, and each policy's model as the learner holds
    it (the ids its embedding takes; the context its engines enforce, from the model folder)."""
    policies = {}
    for p, backend in trainer.backends.items():
        folder = policy_dir(cfg, p)
        vocab = int(backend.model.get_input_embeddings().num_embeddings)  # type: ignore[operator]  # an HF model
        policies[p] = PolicyLimits(vocab, model_facts(folder, load_tokenizer(folder)).context_length)
    return IntakeLimits.from_config(cfg, policies)


class _Rank0:
    """What only rank 0 has: the hub, the orchestrator and the metrics sinks."""

    def __init__(self, cfg: RunConfig, hub: Hub, orchestrator: Orchestrator) -> None:
        self.hub = hub
        self.orchestrator = orchestrator
        self.metrics = MetricsWriter(out_dir(cfg), tensorboard=cfg.metrics.tensorboard, wandb=cfg.metrics.wandb)
        self.signal = SignalWatch(
            cfg.metrics.warn_constant_steps,
            lambda level, text: emit(Notice(level, text)),
            trains_without_advantage=bool(cfg.train.entropy_coef or cfg.train.kl_coef),
        )

    def evaluate(self, label: str, step: int) -> EvalSummary:
        summary = self.orchestrator.evaluate(label, step)
        emit(summary)
        self.metrics.write(step, summary.metrics())
        return summary


def _publish(trainer: Trainer, rank0: _Rank0 | None) -> dict[str, float]:
    weights, out = trainer.export()  # every rank: a collective under ZeRO-3
    if rank0 is not None:
        for p, tensors in weights.items():
            rank0.hub.publish(p, trainer.versions[p], tensors)
    return out


def _save(cfg: RunConfig, trainer: Trainer, state: RunState, rank0: _Rank0 | None) -> None:
    extra = None
    if rank0 is not None:
        extra = {UNTAKEN_UNITS: msgspec.msgpack.encode(rank0.hub.untaken())}
    trainer.checkpoint(checkpoints_dir(cfg), state, rank0=rank0 is not None, extra=extra)


def _read_untaken(checkpoint) -> list[CommittedUnit]:
    path = checkpoint / UNTAKEN_UNITS
    if not path.exists():
        return []
    units = msgspec.msgpack.decode(path.read_bytes(), type=list[CommittedUnit])
    log.info("resume: %d units of later steps were already in and are not rolled out again", len(units))
    return units


def _train_step(trainer: Trainer, rank0: _Rank0 | None, step: int) -> dict[str, float]:
    """One training step on this rank: every plan rank 0 makes of it, as it makes them."""
    source = rank0.orchestrator.step_plans(step) if rank0 is not None else None
    while True:
        plans = next(source) if source is not None else None
        plan = scatter_plans(plans, trainer.rank, trainer.world)
        out = trainer.train(plan)
        if plan.final:
            return out


def _train_loop(
    cfg: RunConfig, trainer: Trainer, state: RunState, rank0: _Rank0 | None, stop: threading.Event
) -> RunSummary | None:
    _publish(trainer, rank0)
    if rank0 is not None and state.eval_start is None:  # a resumed run keeps the evaluation of its step 0
        state.eval_start = rank0.evaluate("start", state.step).success
    start = step_start = time.monotonic()
    saved_step = state.step if state.step > 0 else None  # a resumed run's step is on disk already
    last_eval: EvalSummary | None = None
    while state.step < cfg.run.steps:
        timed_out = cfg.run.time_limit_s > 0 and time.monotonic() - start > cfg.run.time_limit_s
        if broadcast_flag(stop.is_set() or timed_out, trainer.world):
            log.info("stopping early at step %d", state.step)
            if rank0 is not None:
                emit(Stopping(state.step, "signal" if stop.is_set() else "time limit"))
            break
        metrics: dict[str, Any] = _train_step(trainer, rank0, state.step)
        state.step += 1
        state.versions = dict(trainer.versions)
        published = time.monotonic()
        metrics.update(_publish(trainer, rank0))
        metrics["time/publish_s"] = time.monotonic() - published
        metrics["time/step_s"] = time.monotonic() - step_start  # wall time, evaluations and checkpoints left out
        if rank0 is not None:
            assert rank0.orchestrator.last is not None
            data, objective = rank0.orchestrator.last
            adv = objective.advantages
            metrics.update(objective.metrics())
            rank0.signal.observe(state.step, data.samples, adv.values, metrics)
            metrics.update({"learner/groups": float(adv.num_groups), "learner/samples": float(len(data.samples))})
            metrics.update(rollout_metrics(data))
            metrics.update(rank0.hub.metrics())
            metrics.update(rank0.orchestrator.metrics())
            rank0.metrics.write(state.step, metrics)
            if cfg.run.eval_every and state.step % cfg.run.eval_every == 0 and state.step < cfg.run.steps:
                last_eval = rank0.evaluate(f"step {state.step}", state.step)
        if cfg.run.checkpoint_every and state.step % cfg.run.checkpoint_every == 0:
            _save(cfg, trainer, state, rank0)
            saved_step = state.step
        step_start = time.monotonic()
    if saved_step != state.step:  # writing a step's checkpoint twice could only put the complete one at risk
        _save(cfg, trainer, state, rank0)
    if rank0 is None:
        return None
    # A run stopped (signal, time limit) right after a step's evaluation ends on weights already
    # evaluated: that evaluation is the final one, not run and written a second time.
    if last_eval is not None and last_eval.step == state.step:
        end = last_eval.success
    else:
        end = rank0.evaluate("end", state.step).success
    start_s = state.eval_start
    gain = round(100 * (end - start_s), 1) if start_s is not None else None
    return RunSummary(steps=state.step, eval_start=start_s, eval_end=end, improvement_points=gain)


__all__ = ["emit", "run_learner"]
