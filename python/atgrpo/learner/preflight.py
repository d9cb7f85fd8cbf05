"""What the learner checks before any heavy work: the hub's address, its CURVE keys, the model folders
the config names.

Each is cheap to check and would otherwise fail only after torch is imported, the ranks have joined
and the warm start has run (minutes on a CPU), so `atgrpo-learner` checks them before it imports
torch (issue 46) and `job.run_learner` again first thing, for callers that are not the CLI. Nothing
here imports torch, transformers or the endpoints.
"""

from __future__ import annotations

from pathlib import Path

from atgrpo.config import RunConfig
from atgrpo.errors.runtime import ModelFolderError
from atgrpo.transport import keys
from atgrpo.transport.errors import CurveKeyError
from atgrpo.transport.security import check_address, require_keys


def check_learner_inputs(cfg: RunConfig, address: str | None, *, hub: bool = True) -> None:
    """Raise a typed error for what would fail later: `AddressError` (an address no socket could
    bind), `InsecureEndpointError` (tcp other hosts reach, without keys), `CurveKeyError` (a key
    folder without the hub's keypair or `actors/`), `ModelFolderError` (`policies.<p>.path` names no
    HF folder). `hub`: this rank binds the hub (rank 0), so the address and keys are its to check."""
    tp = cfg.transport
    bind = address or tp.endpoint  # empty: a private ipc socket, made when the hub binds
    if hub and bind:
        check_address(bind, "hub")
        require_keys(bind, tp.curve_keys, tp.insecure, "hub")
    if hub and tp.curve_keys is not None:
        keys.hub_keys(tp.curve_keys)
        if not keys.allowed_actors_dir(tp.curve_keys).is_dir():
            raise CurveKeyError(
                f"{tp.curve_keys} has no {keys.ACTORS_DIR}/ folder: the hub would accept no actor "
                f"(make the folder with `atgrpo-keys init`)"
            )
    for p in sorted(cfg.policies):
        path = cfg.policies[p].path
        if not path or path.startswith("@"):
            continue  # the built tiny model, or an alias (`@smollm2`), built on first use
        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file():
            what = "no such folder" if not folder.exists() else "not an HF-format model folder (no config.json)"
            raise ModelFolderError(f"policies.{p}.path = {path!r}: {what}")


__all__ = ["check_learner_inputs"]
