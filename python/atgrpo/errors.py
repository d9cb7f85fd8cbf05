"""Every exception atgrpo raises on purpose. All derive from `AtgrpoError`.

Most classes are defined by the Rust extension (one per error variant, see
`rust/python/src/errors.rs`); the dataset, verifier, engine and model-import errors are Python classes. All are
re-exported here; import them from `atgrpo.errors`.
"""

from atgrpo._core import (
    AtgrpoError,
    DuplicateEnvIdError,
    EnvNotReadyError,
    GenerationError,
    InternalError,
    InvalidConfigError,
    InvalidEnvIdError,
    InvalidProgramError,
    KernelArgumentError,
    KernelShapeError,
    LengthMismatchError,
    PoolClosedError,
    SampleTooLongError,
    SandboxClosedError,
    SandboxConfigError,
    SandboxUnavailableError,
    SnapshotError,
    UnknownTaskError,
)
from atgrpo.data.errors import DatasetError, DatasetFileError, DatasetRecordError, UnknownFormatError
from atgrpo.engines.errors import PromptTooLongError, VllmUnavailableError
from atgrpo.models.importer import ModelImportError
from atgrpo.verify.errors import VerifierStartError

__all__ = [
    "AtgrpoError",
    "DatasetError",
    "DatasetFileError",
    "DatasetRecordError",
    "DuplicateEnvIdError",
    "EnvNotReadyError",
    "GenerationError",
    "InternalError",
    "InvalidConfigError",
    "InvalidEnvIdError",
    "InvalidProgramError",
    "KernelArgumentError",
    "KernelShapeError",
    "LengthMismatchError",
    "ModelImportError",
    "PoolClosedError",
    "PromptTooLongError",
    "SampleTooLongError",
    "SandboxClosedError",
    "SandboxConfigError",
    "SandboxUnavailableError",
    "SnapshotError",
    "UnknownFormatError",
    "UnknownTaskError",
    "VerifierStartError",
    "VllmUnavailableError",
]
