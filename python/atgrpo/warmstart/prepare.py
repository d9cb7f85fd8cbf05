"""Each policy's initial model folder, made once per run before the learner and actors start.

For a policy without `path`, the built-in tiny model is built and warm-started on solver
demonstrations; a path model is used as it is, or, with `warmstart.pretrained`, copied under
out_dir and warm-started there (its source folder is never written). A folder is built beside its
final place and renamed, so a crash leaves no half-made model that a restart would take as done.

A LoRA policy's base is never trained: its folder is the built tiny model as built, or its path as
it is. Under the same rule a full policy is warm-started by (`config.lora.warm_starts_adapter`), its
adapter is instead: the group's base loaded once, each policy's adapter trained in turn on its own
roles' demonstrations (the base frozen, the other adapters untouched), and saved in peft's format
to `paths.warm_adapter_dir`, which the learner loads as the adapter's version 0.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from atgrpo.config import GAME_TASKS, RunConfig
from atgrpo.config.lora import lora_bases, warm_starts_adapter
from atgrpo.devices import resolve_device
from atgrpo.models.adapters import ADAPTER_WEIGHTS, write_adapter
from atgrpo.models.folder import copy_model_files, load_model, load_tokenizer
from atgrpo.models.peft_models import AdapterWeights, attach_adapters
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import policy_dir, source_model_dir, warm_adapter_dir
from atgrpo.warmstart import demos
from atgrpo.warmstart.sft import warm_start

log = logging.getLogger("atgrpo.warmstart")

Progress = Callable[[str, int, int, float], None]
"""(policy, step, steps, loss) after each reported warm-start step."""


def prepare_models(cfg: RunConfig, progress: Progress | None = None, device: torch.device | None = None) -> None:
    """Rank 0, before anything else: every policy's folder (`paths.policy_dir`) exists when it
    returns, and every LoRA policy's warm-started adapter (`paths.warm_adapter_dir`) where it has
    one. The warm start trains on `device` (None: `train.device`); what is saved is the same
    whatever the device."""
    device = device if device is not None else resolve_device(cfg.train.device)
    for p in sorted(cfg.policies):
        _prepare_folder(cfg, p, progress, device)
    for group in lora_bases(cfg):
        todo = [
            p
            for p in group
            if warm_starts_adapter(cfg, p) and not (warm_adapter_dir(cfg, p) / ADAPTER_WEIGHTS).is_file()
        ]
        if todo:
            _warm_start_adapters(cfg, group, todo, progress, device)


def _prepare_folder(cfg: RunConfig, p: str, progress: Progress | None, device: torch.device) -> None:
    folder, source = policy_dir(cfg, p), source_model_dir(cfg, p)
    if folder == source or (folder / "config.json").is_file():
        return  # a path model used as it is, or a model this run already prepared
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    built = source is None
    if source is None:
        build_tiny_model(cfg.policies[p].tiny, tmp)
        source = tmp
    model, tok = load_model(source, device=str(device)), load_tokenizer(source)
    ws = cfg.warmstart
    if cfg.policies[p].lora is not None:
        pass  # a LoRA base stays as built: its adapter is what the warm start trains
    elif ws.steps and cfg.task.task not in GAME_TASKS:
        log.info(
            "[%s] no solver demonstrations for task %s: warm start skipped",
            p,
            cfg.task.task,
        )
    elif ws.steps:
        torch.manual_seed(cfg.run.seed)
        with _demo_source(cfg, p, tok) as demo_batches:
            warm_start(
                model,
                demo_batches,
                pad_id=tok.pad_token_id,
                steps=ws.steps,
                lr=ws.lr,
                answers_only=not built,
                on_step=_reporter(p, progress),
            )
    # The folder is the same whichever device trained it.
    model.to("cpu").save_pretrained(tmp)
    if not built:
        copy_model_files(source, tmp)
    tmp.rename(folder)


def _warm_start_adapters(
    cfg: RunConfig,
    group: list[str],
    todo: list[str],
    progress: Progress | None,
    device: torch.device,
) -> None:
    base_dir = policy_dir(cfg, group[0])

    def save(p: str, _: int, adapter: AdapterWeights) -> None:
        _write_atomically(warm_adapter_dir(cfg, p), cfg, p, adapter, base_dir)
        log.info("[%s] warm-started adapter saved to %s", p, warm_adapter_dir(cfg, p))

    train_adapters(cfg, group, todo, device, save, progress=progress)


AdapterSink = Callable[[str, int, AdapterWeights], None]
"""(policy, updates done, its adapter on the shared base): an adapter to keep, read before it trains on."""


def train_adapters(
    cfg: RunConfig,
    group: list[str],
    todo: list[str],
    device: torch.device,
    save: AdapterSink,
    *,
    progress: Progress | None = None,
    at: Collection[int] | None = None,
) -> dict[str, list[float]]:
    """Warm-start the adapters of `todo` (policies of LoRA group `group`) on one copy of their base,
    in turn; `save` gets each one after n updates for each n in `at` (default: `warmstart.steps`
    alone, the finished adapter). Returns each policy's loss per step."""
    base_dir = policy_dir(cfg, group[0])
    tok = load_tokenizer(base_dir)
    ws = cfg.warmstart
    at = {ws.steps} if at is None else set(at)
    # The adapters' A matrices: the same draw on every try.
    torch.manual_seed(cfg.run.seed)
    model = attach_adapters(load_model(base_dir, dtype="float32", device=str(device)), cfg, group, base_dir)
    losses = {}
    for p in todo:
        adapter = AdapterWeights(model, p)
        adapter.activate()
        # As a full policy's warm start, whichever policies came before.
        torch.manual_seed(cfg.run.seed)
        with _demo_source(cfg, p, tok) as demo_batches:
            losses[p] = warm_start(
                model,
                demo_batches,
                pad_id=tok.pad_token_id,
                steps=ws.steps,
                lr=ws.lr,
                answers_only=cfg.policies[p].path is not None,
                on_step=_reporter(p, progress),
                params=adapter.parameters(),
                snapshot_at=at,
                on_snapshot=lambda n, p=p, adapter=adapter: save(p, n, adapter),
            )
    return losses


def _write_atomically(folder: Path, cfg: RunConfig, p: str, adapter: AdapterWeights, base_dir: Path) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    lora = cfg.policies[p].lora
    assert lora is not None  # a LoRA group's policy
    write_adapter(tmp, lora, adapter.state_dict(), base_dir)
    shutil.rmtree(folder, ignore_errors=True)  # a folder without its weights file: a crash's leftover
    tmp.rename(folder)


@contextmanager
def _demo_source(cfg: RunConfig, p: str, tok) -> Iterator[Callable[[int], list]]:
    """Step -> the demos of policy `p`'s roles only, made by the whole team (so the plan agent's
    prompts show the tool agent's answer, as in every rollout). The workflow is closed on exit:
    in program mode it holds the sandbox the demo programs ran in."""
    from atgrpo.workflows.games import GameWorkflow

    wf, roles, n, ws = (
        GameWorkflow(cfg),
        cfg.roles_of(p),
        cfg.warmstart.batch_size,
        cfg.warmstart,
    )
    try:
        yield lambda step: demos.make_demos(
            wf,
            tok,
            n,
            start=step * n,
            tool_noise=ws.tool_noise,
            seed=cfg.run.seed,
            roles=roles,
        )
    finally:
        wf.close()


def _reporter(p: str, progress: Progress | None) -> Callable[[int, int, float], None]:
    def report(step: int, steps: int, loss: float) -> None:
        log.info("[%s] warm start step %d/%d loss %.3f", p, step, steps, loss)
        if progress is not None:
            progress(p, step, steps, loss)

    return report


__all__ = ["AdapterSink", "prepare_models", "train_adapters"]
