//! AT-GRPO kernels: group ids from (env, agent, turn) keys, group-normalised advantages, reward mixing,
//! token-level broadcast and micro-batch packing. Pure Rust; the binding exposes them to Python.
//!
//! Every function validates its inputs and returns a typed [`KernelError`]; none panics on bad input.

mod advantages;
mod error;
mod groups;
mod packing;

pub use advantages::{compute_advantages, group_advantages, mix_rewards, AdvantageOptions, Advantages, GroupStats};
pub use error::{KernelError, Result};
pub use groups::{group_ids, Groups};
pub use packing::{pack_batch, pad_batch, plan_microbatches, Packed, Padded, Samples};
