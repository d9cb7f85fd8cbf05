"""Type stubs for the private extension `atgrpo._core` (checked against the built module by stubtest).

Import from `atgrpo` instead; this module's API may change without notice.
"""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer, final

__version__: str

# Every public name of the module (stubtest compares this list with the runtime's).
__all__ = [
    "__version__",
    "AtgrpoError",
    "InternalError",
    "UnknownTaskError",
    "InvalidConfigError",
    "InvalidEnvIdError",
    "DuplicateEnvIdError",
    "LengthMismatchError",
    "PoolClosedError",
    "EnvNotReadyError",
    "SnapshotError",
    "GenerationError",
    "KernelShapeError",
    "KernelArgumentError",
    "SampleTooLongError",
    "EnvPool",
    "_panic_for_test",
    "TASKS",
]

# ---- errors (rust/python/src/errors.rs) ----
class AtgrpoError(Exception): ...
class InternalError(AtgrpoError): ...
class UnknownTaskError(AtgrpoError): ...
class InvalidConfigError(AtgrpoError): ...
class InvalidEnvIdError(AtgrpoError): ...
class DuplicateEnvIdError(AtgrpoError): ...
class LengthMismatchError(AtgrpoError): ...
class PoolClosedError(AtgrpoError): ...
class EnvNotReadyError(AtgrpoError): ...
class SnapshotError(AtgrpoError): ...
class GenerationError(AtgrpoError): ...
class KernelShapeError(AtgrpoError): ...
class KernelArgumentError(AtgrpoError): ...
class SampleTooLongError(AtgrpoError): ...

# ---- env pool (rust/python/src/envpool.rs) ----
TASKS: list[str]

@final
class EnvPool:
    def __new__(cls, task: str, num_envs: int, config_json: str = "{}") -> EnvPool: ...
    @property
    def task(self) -> str: ...
    @property
    def num_envs(self) -> int: ...
    @property
    def config_json(self) -> str: ...
    def reset(self, env_ids: npt.NDArray[np.int64], seeds: npt.NDArray[np.uint64], split: str) -> list[str]: ...
    def step(
        self, env_ids: npt.NDArray[np.int64], actions: list[str | bytes | None]
    ) -> tuple[
        list[str],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
        npt.NDArray[np.bool_],
    ]: ...
    def fork(self, src_id: int, dst_ids: npt.NDArray[np.int64]) -> None: ...
    def render(self, env_ids: npt.NDArray[np.int64]) -> list[str]: ...
    def solve(self, env_ids: npt.NDArray[np.int64]) -> tuple[list[str | None], npt.NDArray[np.uint32]]: ...
    def status(
        self, env_ids: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]: ...
    def snapshot(self, env_ids: npt.NDArray[np.int64]) -> list[bytes]: ...
    def restore(self, env_ids: npt.NDArray[np.int64], blobs: list[bytes]) -> None: ...
    def close(self) -> None: ...

def _panic_for_test() -> None: ...

# ---- kernels (rust/python/src/kernels.rs) ----
# Semantics, shapes and defaults: `atgrpo.kernels` (the facade); every argument here is required.
__all__ += [
    "group_ids",
    "group_advantages",
    "compute_advantages",
    "mix_rewards",
    "plan_microbatches",
    "pad_batch",
    "pack_batch",
]

# (mean, std, size, num_singleton, num_constant, num_empty, num_nonfinite)
_GroupStats = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64], int, int, int, int]

def group_ids(
    env: npt.NDArray[np.int64], agent: npt.NDArray[np.int64], turn: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], int]: ...
def group_advantages(
    group_ids: npt.NDArray[np.int64],
    rewards: npt.NDArray[np.float64],
    num_groups: int,
    eps: float,
    ddof: int,
    scale_by_std: bool,
) -> tuple[npt.NDArray[np.float64], _GroupStats]: ...
def compute_advantages(
    env: npt.NDArray[np.int64],
    agent: npt.NDArray[np.int64],
    turn: npt.NDArray[np.int64],
    rewards: npt.NDArray[np.float64],
    eps: float,
    ddof: int,
    scale_by_std: bool,
) -> tuple[npt.NDArray[np.int64], int, npt.NDArray[np.float64], _GroupStats]: ...
def mix_rewards(
    team: npt.NDArray[np.float64], local: npt.NDArray[np.float64], alpha: float
) -> npt.NDArray[np.float64]: ...
def plan_microbatches(lengths: npt.NDArray[np.int64], max_tokens: int) -> list[npt.NDArray[np.int64]]: ...
def pad_batch(
    tokens: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    prompt_lens: npt.NDArray[np.int64],
    advantages: npt.NDArray[np.float64],
    indices: npt.NDArray[np.int64],
    pad_id: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.float32]]: ...
def pack_batch(
    tokens: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
    prompt_lens: npt.NDArray[np.int64],
    advantages: npt.NDArray[np.float64],
    indices: npt.NDArray[np.int64],
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.bool_],
    npt.NDArray[np.float32],
]: ...

# ---- checksum (rust/python/src/checksum.rs) ----
# Caller: `atgrpo.transport.tensors` (zlib.crc32 values, buffers read in place without the GIL).
__all__ += ["crc32_many"]

def crc32_many(buffers: Sequence[Buffer], threads: int) -> list[int]: ...

# ---- sandbox (rust/python/src/sandbox.rs) ----
# Semantics and defaults: `atgrpo.sandbox` (the facade).
__all__ += [
    "SandboxConfigError",
    "InvalidProgramError",
    "SandboxUnavailableError",
    "SandboxClosedError",
    "Sandbox",
    "SandboxProgram",
    "SandboxTestResult",
    "SandboxResult",
]

class SandboxConfigError(AtgrpoError): ...
class InvalidProgramError(AtgrpoError): ...
class SandboxUnavailableError(AtgrpoError): ...
class SandboxClosedError(AtgrpoError): ...

@final
class SandboxProgram:
    @staticmethod
    def stdio(code: str, cases: list[tuple[str | bytes, str | bytes | None]]) -> SandboxProgram: ...
    @staticmethod
    def function(code: str, tests: list[str], setup: str = "") -> SandboxProgram: ...
    @property
    def kind(self) -> str: ...
    @property
    def num_tests(self) -> int: ...

@final
class SandboxTestResult:
    @property
    def verdict(self) -> str: ...
    @property
    def stdout(self) -> bytes: ...
    @property
    def stderr_tail(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def wall_s(self) -> float: ...

@final
class SandboxResult:
    @property
    def tests(self) -> list[SandboxTestResult]: ...
    @property
    def verdicts(self) -> list[str]: ...
    @property
    def passed(self) -> bool: ...
    @property
    def starts(self) -> int: ...
    @property
    def wall_s(self) -> float: ...

@final
class Sandbox:
    def __new__(cls, config_json: str = "{}") -> Sandbox: ...
    @property
    def isolation_json(self) -> str: ...
    @property
    def config_json(self) -> str: ...
    def run_batch(self, programs: list[SandboxProgram]) -> list[SandboxResult]: ...
    def close(self) -> None: ...
