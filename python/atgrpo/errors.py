"""Every exception atgrpo raises on purpose. All derive from `AtgrpoError`.

The classes are defined by the Rust extension (one per error variant, see
`rust/python/src/errors.rs`) and re-exported here; import them from `atgrpo.errors`.
"""

from atgrpo._core import (
    AtgrpoError,
    DuplicateEnvIdError,
    EnvNotReadyError,
    GenerationError,
    InternalError,
    InvalidConfigError,
    InvalidEnvIdError,
    KernelArgumentError,
    KernelShapeError,
    LengthMismatchError,
    PoolClosedError,
    SampleTooLongError,
    SnapshotError,
    UnknownTaskError,
)

__all__ = [
    "AtgrpoError",
    "DuplicateEnvIdError",
    "EnvNotReadyError",
    "GenerationError",
    "InternalError",
    "InvalidConfigError",
    "InvalidEnvIdError",
    "KernelArgumentError",
    "KernelShapeError",
    "LengthMismatchError",
    "PoolClosedError",
    "SampleTooLongError",
    "SnapshotError",
    "UnknownTaskError",
]
