//! The crate's one error enum. Each variant maps to one Python exception class in the binding.
//!
//! Note what is *not* here: unparseable or illegal LLM actions are not errors. They are ordinary
//! steps that earn the task's penalty (see `task::StepOutcome::valid`).

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum EnvError {
    #[error("unknown task {name:?}; known tasks: {known}")]
    UnknownTask { name: String, known: String },
    #[error("invalid {task} config: {msg}")]
    InvalidConfig { task: &'static str, msg: String },
    #[error("env id {id} is out of range for a pool of {num_envs} envs")]
    InvalidEnvId { id: i64, num_envs: usize },
    #[error("env id {id} appears more than once in one batch call")]
    DuplicateEnvId { id: usize },
    #[error("length mismatch: {what} has {got} entries, expected {expected} (one per env id)")]
    LengthMismatch { what: &'static str, expected: usize, got: usize },
    #[error("the env pool is closed")]
    PoolClosed,
    #[error("env {id} is not ready: {reason}")]
    EnvNotReady { id: usize, reason: &'static str },
    #[error("invalid snapshot: {0}")]
    Snapshot(String),
    #[error("level generation failed: {0}")]
    Generation(String),
}

pub type Result<T> = std::result::Result<T, EnvError>;
