"""Each policy's initial model folder, made once per run before the learner and actors start.

For a policy without `path`, the built-in tiny model is built and warm-started on solver
demonstrations; a path model is used as it is, or, with `warmstart.pretrained`, copied under
out_dir and warm-started there (its source folder is never written). A folder is built beside its
final place and renamed, so a crash leaves no half-made model that a restart would take as done.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable

import torch

from atgrpo.config import GAME_TASKS, RunConfig
from atgrpo.devices import resolve_device
from atgrpo.models.folder import copy_model_files, load_model, load_tokenizer
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import policy_dir, source_model_dir
from atgrpo.warmstart import demos
from atgrpo.warmstart.sft import warm_start

log = logging.getLogger("atgrpo.warmstart")

Progress = Callable[[str, int, int, float], None]
"""(policy, step, steps, loss) after each reported warm-start step."""


def prepare_models(cfg: RunConfig, progress: Progress | None = None, device: torch.device | None = None) -> None:
    """Rank 0, before anything else: every policy's folder (`paths.policy_dir`) exists when it
    returns. The warm start trains on `device` (None: `train.device`), the saved folder is the same
    whatever the device."""
    device = device if device is not None else resolve_device(cfg.train.device)
    from atgrpo.workflows.games import GameWorkflow

    for p in sorted(cfg.policies):
        folder, source = policy_dir(cfg, p), source_model_dir(cfg, p)
        if folder == source or (folder / "config.json").is_file():
            continue  # a path model used as it is, or a model this run already prepared
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        built = source is None
        if source is None:
            build_tiny_model(cfg.policies[p].tiny, tmp)
            source = tmp
        model, tok = load_model(source, device=str(device)), load_tokenizer(source)
        ws = cfg.warmstart
        if ws.steps and cfg.task.task not in GAME_TASKS:
            log.info("[%s] no solver demonstrations for task %s: warm start skipped", p, cfg.task.task)
        elif ws.steps:
            torch.manual_seed(cfg.run.seed)
            # Demos of this policy's roles only, made by the whole team (so the plan agent's prompts
            # show the tool agent's answer, as in every rollout).
            wf, roles, n = GameWorkflow(cfg), cfg.roles_of(p), ws.batch_size

            def report(step: int, steps: int, loss: float, policy: str = p) -> None:
                log.info("[%s] warm start step %d/%d loss %.3f", policy, step, steps, loss)
                if progress is not None:
                    progress(policy, step, steps, loss)

            warm_start(
                model,
                lambda step: demos.make_demos(wf, tok, n, start=step * n, tool_noise=ws.tool_noise, seed=cfg.run.seed, roles=roles),
                pad_id=tok.pad_token_id, steps=ws.steps, lr=ws.lr, answers_only=not built, on_step=report,
            )
        model.to("cpu").save_pretrained(tmp)  # the folder is the same whichever device trained it
        if not built:
            copy_model_files(source, tmp)
        tmp.rename(folder)


__all__ = ["prepare_models"]
