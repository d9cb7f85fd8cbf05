//! atgrpo-envs: batched environments for the game and planning workflows of AT-GRPO.
//!
//! Pure Rust (no pyo3). `Pool<T>` holds N episodes of one `Task`; `registry::make_pool` builds a
//! type-erased pool by name for the binding. Each task module holds its rules, its level generator
//! and its optimal solver. `atgrpo.envs.reference` (Python) mirrors every rule here; the
//! equivalence tests in `tests/` drive both with the same seeds and actions.

pub mod codec;
mod error;
pub mod parse;
pub mod planpath;
pub mod pool;
pub mod registry;
pub mod rng;
pub mod sokoban;
pub mod sudoku;
pub mod task;

pub use error::{EnvError, Result};
pub use pool::{Pool, StepColumns, TextColumn};
pub use registry::{make_pool, AnyPool, TASKS};
pub use task::{Common, Split, Task};
