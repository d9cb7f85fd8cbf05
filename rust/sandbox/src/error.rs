//! The crate's one error enum. Each variant maps to one Python exception class in the binding.
//!
//! Note what is *not* here: anything a program under test does. A crash, a hang, a fork bomb or a
//! failed spawn of one execution is a verdict (`Verdict::SandboxError` at worst), never an `Err`.
//! Errors are for the caller's mistakes and for a sandbox that cannot be built at all.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum SandboxError {
    /// A config field is unknown, missing or out of range, or the JSON is malformed.
    #[error("invalid sandbox config: {0}")]
    InvalidConfig(String),
    /// A program is malformed (no tests, too large, ...).
    #[error("invalid program {index}: {msg}")]
    InvalidProgram { index: usize, msg: String },
    /// The isolation asked for cannot be had on this machine (e.g. `require_namespaces` without
    /// user namespaces), or the interpreter fails its self-test inside the sandbox.
    #[error("sandbox unavailable: {0}")]
    Unavailable(String),
    /// The sandbox was closed.
    #[error("the sandbox is closed")]
    Closed,
}

pub type Result<T> = std::result::Result<T, SandboxError>;
