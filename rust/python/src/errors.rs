//! One Python exception class per Rust error variant, all under `AtgrpoError`.
//!
//! The classes are created here and re-exported by `atgrpo.errors`; `to_py_env` and `to_py_kernel`
//! are the only conversions, so a new variant fails to compile until it has a class.

use atgrpo_envs::EnvError;
use atgrpo_kernels::KernelError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(atgrpo._core, AtgrpoError, PyException, "Base class of every atgrpo error.");
create_exception!(atgrpo._core, InternalError, AtgrpoError, "A bug in atgrpo (a Rust panic).");
create_exception!(atgrpo._core, UnknownTaskError, AtgrpoError, "No task is registered under that name.");
create_exception!(
    atgrpo._core,
    InvalidConfigError,
    AtgrpoError,
    "A task config field is missing, unknown or out of range."
);
create_exception!(atgrpo._core, InvalidEnvIdError, AtgrpoError, "An env id is negative or not below the pool size.");
create_exception!(atgrpo._core, DuplicateEnvIdError, AtgrpoError, "The same env id appears twice in one batch call.");
create_exception!(
    atgrpo._core,
    LengthMismatchError,
    AtgrpoError,
    "Per-env arguments do not have one entry per env id."
);
create_exception!(atgrpo._core, PoolClosedError, AtgrpoError, "The env pool was closed.");
create_exception!(atgrpo._core, EnvNotReadyError, AtgrpoError, "The env was never reset, or its episode is over.");
create_exception!(
    atgrpo._core,
    SnapshotError,
    AtgrpoError,
    "Snapshot bytes are malformed or belong to another task or config."
);
create_exception!(
    atgrpo._core,
    GenerationError,
    AtgrpoError,
    "No level satisfying the config was found within the attempt budget."
);
create_exception!(atgrpo._core, KernelShapeError, AtgrpoError, "Kernel inputs have mismatched lengths.");
create_exception!(atgrpo._core, KernelArgumentError, AtgrpoError, "A kernel argument is out of its domain.");
create_exception!(atgrpo._core, SampleTooLongError, AtgrpoError, "A sample does not fit the micro-batch token budget.");

pub fn to_py_env(err: EnvError) -> PyErr {
    let msg = err.to_string();
    match err {
        EnvError::UnknownTask { .. } => UnknownTaskError::new_err(msg),
        EnvError::InvalidConfig { .. } => InvalidConfigError::new_err(msg),
        EnvError::InvalidEnvId { .. } => InvalidEnvIdError::new_err(msg),
        EnvError::DuplicateEnvId { .. } => DuplicateEnvIdError::new_err(msg),
        EnvError::LengthMismatch { .. } => LengthMismatchError::new_err(msg),
        EnvError::PoolClosed => PoolClosedError::new_err(msg),
        EnvError::EnvNotReady { .. } => EnvNotReadyError::new_err(msg),
        EnvError::Snapshot(_) => SnapshotError::new_err(msg),
        EnvError::Generation(_) => GenerationError::new_err(msg),
    }
}

pub fn to_py_kernel(err: KernelError) -> PyErr {
    let msg = err.to_string();
    match err {
        KernelError::ShapeMismatch { .. } => KernelShapeError::new_err(msg),
        KernelError::InvalidArgument { .. } => KernelArgumentError::new_err(msg),
        KernelError::SampleTooLong { .. } => SampleTooLongError::new_err(msg),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AtgrpoError", py.get_type::<AtgrpoError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add("UnknownTaskError", py.get_type::<UnknownTaskError>())?;
    m.add("InvalidConfigError", py.get_type::<InvalidConfigError>())?;
    m.add("InvalidEnvIdError", py.get_type::<InvalidEnvIdError>())?;
    m.add("DuplicateEnvIdError", py.get_type::<DuplicateEnvIdError>())?;
    m.add("LengthMismatchError", py.get_type::<LengthMismatchError>())?;
    m.add("PoolClosedError", py.get_type::<PoolClosedError>())?;
    m.add("EnvNotReadyError", py.get_type::<EnvNotReadyError>())?;
    m.add("SnapshotError", py.get_type::<SnapshotError>())?;
    m.add("GenerationError", py.get_type::<GenerationError>())?;
    m.add("KernelShapeError", py.get_type::<KernelShapeError>())?;
    m.add("KernelArgumentError", py.get_type::<KernelArgumentError>())?;
    m.add("SampleTooLongError", py.get_type::<SampleTooLongError>())?;
    Ok(())
}
