"""Every exception atgrpo raises on purpose. All derive from `AtgrpoError`; import them from here.

Importing this module is cheap: it loads the extension and three leaf modules, never torch, zmq, the
data loaders or the verifier.

- Rust errors (one class per error variant, see `rust/python/src/errors.rs`) come from `atgrpo._core`.
- `atgrpo.errors.data`: dataset loading (`DatasetError` and subclasses).
- `atgrpo.errors.transport`: the transport layer (`TransportError`, one subclass per reason code).
- `atgrpo.errors.runtime`: engines, verifier, model import, `atgrpo-eval`, the actor.

Each class is defined once, in one of these; the modules that raise them import them from there
(`atgrpo.data.errors`, `atgrpo.transport.errors`, ... re-export them for older imports).
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
from atgrpo.errors.data import DatasetError, DatasetFileError, DatasetRecordError, UnknownFormatError
from atgrpo.errors.runtime import (
    ActorError,
    CheckpointLoadError,
    CheckpointWriteError,
    PlacementError,
    ConfigChangedError,
    EvalError,
    ModelImportError,
    PromptTooLongError,
    UnitLost,
    UnsupportedModelError,
    VerifierStartError,
    VllmUnavailableError,
)
from atgrpo.errors.transport import (
    AddressError,
    ChecksumMismatch,
    CurveKeyError,
    FrameCountMismatch,
    InsecureEndpointError,
    InvalidMessage,
    MalformedMessage,
    OversizedMessage,
    ProtocolMismatch,
    ShapeMismatch,
    TransportClosed,
    TransportError,
    TransportTimeout,
    UnexpectedReply,
    UnknownKind,
    UnsupportedDtype,
    WeightsError,
    WeightsHeaderError,
)

__all__ = [
    "ActorError",
    "ConfigChangedError",
    "AddressError",
    "AtgrpoError",
    "CheckpointLoadError",
    "CheckpointWriteError",
    "PlacementError",
    "ChecksumMismatch",
    "CurveKeyError",
    "DatasetError",
    "DatasetFileError",
    "DatasetRecordError",
    "DuplicateEnvIdError",
    "EnvNotReadyError",
    "EvalError",
    "FrameCountMismatch",
    "InsecureEndpointError",
    "GenerationError",
    "InternalError",
    "InvalidConfigError",
    "InvalidEnvIdError",
    "InvalidMessage",
    "InvalidProgramError",
    "KernelArgumentError",
    "KernelShapeError",
    "LengthMismatchError",
    "MalformedMessage",
    "ModelImportError",
    "OversizedMessage",
    "PoolClosedError",
    "PromptTooLongError",
    "ProtocolMismatch",
    "SampleTooLongError",
    "SandboxClosedError",
    "SandboxConfigError",
    "SandboxUnavailableError",
    "ShapeMismatch",
    "SnapshotError",
    "TransportClosed",
    "TransportError",
    "TransportTimeout",
    "UnexpectedReply",
    "UnitLost",
    "UnsupportedModelError",
    "UnknownFormatError",
    "UnknownKind",
    "UnknownTaskError",
    "UnsupportedDtype",
    "VerifierStartError",
    "VllmUnavailableError",
    "WeightsError",
    "WeightsHeaderError",
]
