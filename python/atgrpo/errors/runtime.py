"""Errors of the engines, the verifier, model import, evaluation, resume and the actor. All derive from
`AtgrpoError` (and, where callers expect it, from the matching builtin).

A leaf module (only the extension's base class), so that `atgrpo.errors` loads no torch, vLLM,
transformers or verifier; the modules that raise these import them from here.
"""

from __future__ import annotations

from atgrpo._core import AtgrpoError


class PromptTooLongError(AtgrpoError, ValueError):
    """A prompt plus `max_new_tokens` exceeds the model's context length (`atgrpo.engines`)."""


class VllmUnavailableError(AtgrpoError, ImportError):
    """vLLM is not installed, or its build does not run on the requested device (`atgrpo.engines`)."""


class VerifierStartError(AtgrpoError):
    """A Math-Verify worker process could not start (missing package, crash on import, start timeout)."""


class ModelImportError(AtgrpoError, ValueError):
    """The source is not a model atgrpo can import, or the imported folder is not clean."""


class ModelFolderError(AtgrpoError, FileNotFoundError):
    """A model folder the run or a loader names is missing or not HF format (no config.json)."""


class UnsupportedModelError(AtgrpoError, ValueError):
    """The model lacks a structure a requested learner feature needs, e.g. decoder layers to
    checkpoint (`learner.checkpointing`)."""


class EvalError(AtgrpoError, ValueError):
    """Bad arguments or inputs for an evaluation (`atgrpo-eval` reports it and exits with status 2)."""


class ConfigChangedError(AtgrpoError, ValueError):
    """A run would resume from its checkpoints with a config that changes what it learns
    (`learner.checkpoints`)."""


class CheckpointWriteError(AtgrpoError, OSError):
    """A checkpoint could not be written (disk full, permissions); the half-written folder was
    removed and `checkpoints/latest` still names the previous complete one (`learner.trainer`)."""


class CheckpointLoadError(AtgrpoError, ValueError):
    """A checkpoint's part does not belong to the policy loading it, e.g. another policy's LoRA
    adapter, whose tensor names alone would fit (`learner.backends`)."""


class PlacementError(AtgrpoError, ValueError):
    """`launch.learner_cpus` / `launch.actor_cpus` name cores this process may not run on
    (`atgrpo.placement`)."""


class LaunchError(AtgrpoError, RuntimeError):
    """A launcher could not start the run's processes: the Ray cluster is missing, unreachable, too
    small, or lost a node while the run started (`atgrpo.launch.ray_cluster`)."""


class RunProcessLost(AtgrpoError, RuntimeError):
    """A process of a Ray run ended, or stopped answering, and the run cannot go on; the message names
    the process, its node, how it ended and its log's tail (`atgrpo.launch.ray_run`, which stops the
    run and prints it)."""


class RendezvousError(AtgrpoError, RuntimeError):
    """A rank of a multi-rank learner could not reach the rendezvous, or ranks did not join it within
    its clock (`ATGRPO_RENDEZVOUS_TIMEOUT_S`, `launch.ray_rendezvous_timeout_s`); names them
    (`atgrpo.learner.distributed`)."""


class ActorError(AtgrpoError, RuntimeError):
    """The hub refused this actor or answered out of protocol."""


class BenchNotRunError(AtgrpoError, RuntimeError):
    """An `atgrpo-bench` suite cannot run on this machine (e.g. `gpu` without a CUDA device); the
    message says why."""


class LearningSuiteError(AtgrpoError, ValueError):
    """`atgrpo-bench learning`: an arm the suite does not have, or a run of the suite that failed
    (exit status or no `eval.json`; the message names its log)."""


class UnitLost(AtgrpoError):
    """The hub refused a batch of the unit: its lease expired (this actor was too slow, or thought
    dead) and the unit is someone else's now. The actor drops the unit and asks for the next one."""
