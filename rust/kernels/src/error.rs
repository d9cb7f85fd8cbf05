//! The crate's one error enum. Each variant maps to one Python exception class in the binding.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum KernelError {
    #[error("shape mismatch: {what} has {got} entries, expected {expected}")]
    ShapeMismatch { what: &'static str, expected: usize, got: usize },
    #[error("invalid argument {name}: {msg}")]
    InvalidArgument { name: &'static str, msg: String },
    #[error("sample {index} has {len} tokens, more than the micro-batch budget of {max_tokens}")]
    SampleTooLong { index: usize, len: usize, max_tokens: usize },
}

pub type Result<T> = std::result::Result<T, KernelError>;
