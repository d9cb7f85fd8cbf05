//! The contract between the pool and one task (Sokoban, Sudoku, Plan-Path).
//!
//! A task owns one episode's state and knows its rules; the pool owns the episode bookkeeping that is
//! the same for every task (turn counter, turn limit, success bonus, alpha mixing), so every task ends
//! episodes and mixes rewards the same way. Adding a task = one module implementing `Task` plus one
//! line in `registry.rs`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::codec::{Reader, Writer};
use crate::error::Result;
use crate::parse::Dir;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    Train,
    Eval,
}

impl Split {
    pub fn parse(name: &str) -> Option<Split> {
        match name {
            "train" => Some(Split::Train),
            "eval" => Some(Split::Eval),
            _ => None,
        }
    }
}

/// Settings shared by every task: the episode limit and the reward scale. Given as flat keys next to
/// the task's own keys (`{"size": 6, "max_steps": 8, "alpha": 1.0}`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Common {
    /// Turn limit: after this many `step` calls without success the episode ends, truncated (a failure).
    pub max_steps: u32,
    /// Most moves (or cell assignments) one action may hold; longer answers are unparseable.
    pub max_moves: u32,
    /// Weight of the team part: reward = alpha * team + local (python/atgrpo/ALGORITHM.md).
    pub alpha: f64,
    /// Team reward on the step that solves the puzzle.
    pub success_bonus: f64,
    /// Local reward added once per illegal move (into a wall, onto a given digit, ...); the move is skipped.
    pub invalid_move_penalty: f64,
    /// Local reward of an unparseable answer; the state is left unchanged.
    pub parse_penalty: f64,
}

impl Default for Common {
    fn default() -> Self {
        Self {
            max_steps: 20,
            max_moves: 256,
            alpha: 1.0,
            success_bonus: 1.0,
            invalid_move_penalty: -0.05,
            parse_penalty: -0.5,
        }
    }
}

pub const COMMON_KEYS: [&str; 6] =
    ["max_steps", "max_moves", "alpha", "success_bonus", "invalid_move_penalty", "parse_penalty"];

/// What one action did, before the pool adds the team part and the turn limit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Shaping (progress) plus penalties.
    pub local: f64,
    /// The puzzle is solved now.
    pub solved: bool,
    /// The episode cannot be won any more (e.g. a box on a dead square).
    pub failed: bool,
    /// The action parsed and every move in it was legal.
    pub valid: bool,
}

/// Reused buffers, so a step allocates nothing.
#[derive(Default)]
pub struct Scratch {
    pub moves: Vec<Dir>,
    pub cells: Vec<(u8, u8, u8)>,
}

pub trait Task: Clone + Send + Sync + 'static {
    type Config: Clone + std::fmt::Debug + Default + DeserializeOwned + Serialize + Send + Sync;
    const NAME: &'static str;
    /// Byte that tags this task's snapshots.
    const TAG: u8;

    fn check_config(cfg: &Self::Config, common: &Common) -> Result<()>;
    /// A fresh level for `seed`; only levels of `split` are ever returned (see `rng::split_of_level`).
    fn generate(cfg: &Self::Config, seed: u64, split: Split) -> Result<Self>;
    /// Applies one raw answer (`None`: not valid text at all). Only called while the episode runs.
    fn step(&mut self, common: &Common, action: Option<&str>, scratch: &mut Scratch) -> Outcome;
    fn render(&self, out: &mut String);
    /// An optimal answer from the current state in the prompt format, or None if unsolvable.
    fn solve(&self) -> Option<String>;
    /// Optimal solution length from the level's start (moves, pushes or empty cells: see the task).
    fn optimal_len(&self) -> u32;
    fn encode(&self, out: &mut Writer);
    fn decode(cfg: &Self::Config, input: &mut Reader<'_>) -> Result<Self>;
}
