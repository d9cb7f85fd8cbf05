//! AT-GRPO kernels: group ids from (env, agent, turn) keys, group-normalised advantages, reward mixing,
//! token-level broadcast and micro-batch packing. Pure Rust; the binding exposes them to Python.

mod error;

pub use error::{KernelError, Result};
