//! Sudoku, 4x4 (2x2 boxes) or 9x9 (3x3 boxes). Rules, answer formats and rewards are documented for
//! users in `envs/sudoku/README.md`; `atgrpo.envs.reference.sudoku` mirrors everything here.
//!
//! Invariants:
//! - Every puzzle has exactly one solution (`generate`); `solution` is it.
//! - Given cells never change: an answer that writes another digit there is an invalid move, skipped.
//! - Solved means complete, every row/column/box valid, and every given digit unchanged (a valid full
//!   grid that contradicts a given is never solved; python/atgrpo/ALGORITHM.md, rule "Sudoku givens
//!   are binding"). Sudoku never fails: an episode ends on success or at the pool's turn limit, which is never
//!   success (rule "Truncation is failure").
//! - Reward of one step (before the pool adds the team part): `parse_penalty` if unparseable;
//!   otherwise `invalid_move_penalty` per invalid assignment, added in order, then
//!   `+ (correct_after - correct_before) / empty_at_start`, where `correct` counts non-given cells equal
//!   to the solution. The Python mirror computes the same f64 operations in the same order.

mod answer;
mod board;
mod generate;
mod solver;

use serde::{Deserialize, Serialize};

use crate::codec::{ensure, Reader, Writer};
use crate::error::{EnvError, Result};
use crate::task::{Common, Outcome, Scratch, Split, Task};
use answer::{format_grid, parse_answer, Mode};
use board::{is_complete_valid, render_grid, Geometry, Grid, MAX_CELLS};

/// Default number of givens per size, when `clues` is not set.
pub const DEFAULT_CLUES_4: u32 = 6;
pub const DEFAULT_CLUES_9: u32 = 30;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SudokuConfig {
    /// Side of the grid: 4 (2x2 boxes) or 9 (3x3 boxes).
    pub size: u32,
    /// Target number of givens: 4..=15 for 4x4, 17..=80 for 9x9; unset (null): 6 for 4x4, 30 for
    /// 9x9. The generator removes givens down to this number while the solution stays unique; where
    /// no further given can go, the puzzle keeps more (typically near the lower ends of the ranges).
    pub clues: Option<u32>,
}

impl Default for SudokuConfig {
    fn default() -> Self {
        Self { size: 4, clues: None }
    }
}

impl SudokuConfig {
    /// The target number of givens, default applied (meaningful once `check_config` passed).
    pub fn target_clues(&self) -> u32 {
        self.clues.unwrap_or(if self.size == 9 { DEFAULT_CLUES_9 } else { DEFAULT_CLUES_4 })
    }
}

#[derive(Clone, Debug)]
pub struct Sudoku {
    geo: Geometry,
    /// The given digit of each cell, 0 where the cell is to be filled.
    givens: Grid,
    board: Grid,
    solution: Grid,
    /// Empty cells of the puzzle at the start (its optimal answer length; at least 1).
    empty_start: u8,
}

impl Sudoku {
    fn from_puzzle(geo: Geometry, puzzle: Grid, solution: Grid) -> Self {
        let empty = puzzle[..geo.cells()].iter().filter(|&&d| d == 0).count();
        Self { geo, givens: puzzle, board: puzzle, solution, empty_start: empty as u8 }
    }

    /// Complete, every unit valid, and every given digit where it was (rule "Sudoku givens are binding").
    pub fn is_solved(&self) -> bool {
        let cells = self.geo.cells();
        let givens_kept = self.givens[..cells].iter().zip(&self.board[..cells]).all(|(&g, &b)| g == 0 || g == b);
        givens_kept && is_complete_valid(self.geo, &self.board)
    }

    /// Non-given cells holding their solution digit.
    fn correct(&self) -> usize {
        let cells = self.geo.cells();
        (0..cells).filter(|&i| self.givens[i] == 0 && self.board[i] == self.solution[i]).count()
    }

    /// Applies one assignment (1-based row and column); false if it is an invalid move (skipped).
    fn assign(&mut self, mode: Mode, row: u8, col: u8, value: u8) -> bool {
        let side = self.geo.side();
        let (row, col, value) = (usize::from(row), usize::from(col), usize::from(value));
        let lowest = if mode == Mode::Grid { 0 } else { 1 };
        if !(1..=side).contains(&row) || !(1..=side).contains(&col) || !(lowest..=side).contains(&value) {
            return false;
        }
        let cell = (row - 1) * side + (col - 1);
        let value = value as u8;
        let given = self.givens[cell];
        if given != 0 {
            // Repeating a given (or, in a grid, leaving it blank) is allowed and changes nothing.
            return value == given || (mode == Mode::Grid && value == 0);
        }
        self.board[cell] = value;
        true
    }

    pub fn board_text(&self) -> String {
        let mut s = String::new();
        render_grid(self.geo, &self.board, &mut s);
        s
    }
}

fn invalid(msg: String) -> EnvError {
    EnvError::InvalidConfig { task: Sudoku::NAME, msg }
}

impl Task for Sudoku {
    type Config = SudokuConfig;
    const NAME: &'static str = "sudoku";
    const TAG: u8 = 2;

    fn check_config(cfg: &Self::Config, _common: &Common) -> Result<()> {
        let Some(geo) = Geometry::new(cfg.size) else {
            return Err(invalid(format!("size must be 4 or 9, got {}", cfg.size)));
        };
        let cells = geo.cells() as u32;
        let lowest = if cfg.size == 4 { 4 } else { 17 };
        let clues = cfg.target_clues();
        if !(lowest..cells).contains(&clues) {
            return Err(invalid(format!(
                "clues must be in {lowest}..={} for size {} (fewer givens cannot be unique, and at least one \
                 cell must be empty), got {clues}",
                cells - 1,
                cfg.size
            )));
        }
        Ok(())
    }

    fn generate(cfg: &Self::Config, seed: u64, split: Split) -> Result<Self> {
        Self::check_config(cfg, &Common::default())?;
        let geo = Geometry::new(cfg.size).expect("checked");
        let g = generate::generate(geo, cfg.target_clues() as usize, seed, split).ok_or_else(|| {
            EnvError::Generation(format!(
                "sudoku seed {seed}: no {split:?} grid in {} attempts",
                generate::MAX_ATTEMPTS
            ))
        })?;
        Ok(Self::from_puzzle(geo, g.puzzle, g.solution))
    }

    fn step(&mut self, common: &Common, action: Option<&str>, scratch: &mut Scratch) -> Outcome {
        let unparseable = Outcome { local: common.parse_penalty, solved: false, failed: false, valid: false };
        let Some(text) = action else {
            return unparseable;
        };
        let Some(mode) = parse_answer(text, self.geo.side(), common.max_moves as usize, &mut scratch.cells) else {
            return unparseable;
        };
        let before = self.correct();
        let mut local = 0.0;
        let mut valid = true;
        for &(row, col, value) in &scratch.cells {
            if !self.assign(mode, row, col, value) {
                local += common.invalid_move_penalty;
                valid = false;
            }
        }
        let after = self.correct();
        local += (after as f64 - before as f64) / f64::from(self.empty_start);
        Outcome { local, solved: self.is_solved(), failed: false, valid }
    }

    fn render(&self, out: &mut String) {
        render_grid(self.geo, &self.board, out);
    }

    /// The solution grid as a grid answer; stepping it solves the board from any state.
    /// Runs the solver on the givens (the stored solution is not trusted as an answer: this is the
    /// solver the benchmark times), so the answer solves the board from any current state.
    fn solve(&self) -> Option<String> {
        let mut solver = solver::Solver::new(self.geo, &self.givens[..self.geo.cells()])?;
        solver.solve().then(|| format_grid(self.geo, solver.grid()))
    }

    fn optimal_len(&self) -> u32 {
        u32::from(self.empty_start)
    }

    /// Layout: size (u8), givens mask (bytes: 0/1 per cell), board (bytes), solution (bytes),
    /// empty cells at start (u8). Given digits are the board's digits at masked cells.
    fn encode(&self, out: &mut Writer) {
        let cells = self.geo.cells();
        out.u8(self.geo.side() as u8);
        let mask: Vec<u8> = self.givens[..cells].iter().map(|&g| u8::from(g != 0)).collect();
        out.bytes(&mask);
        out.bytes(&self.board[..cells]);
        out.bytes(&self.solution[..cells]);
        out.u8(self.empty_start);
    }

    fn decode(cfg: &Self::Config, input: &mut Reader<'_>) -> Result<Self> {
        let size = input.u8()?;
        ensure(u32::from(size) == cfg.size, || {
            format!("sudoku snapshot of size {size}, this pool plays {}", cfg.size)
        })?;
        let geo = Geometry::new(cfg.size).ok_or_else(|| EnvError::Snapshot(format!("bad size {size}")))?;
        let cells = geo.cells();
        let mut read_grid = |what: &str, max: u8| -> Result<Grid> {
            let bytes = input.bytes()?;
            ensure(bytes.len() == cells, || format!("sudoku {what}: {} cells, expected {cells}", bytes.len()))?;
            ensure(bytes.iter().all(|&b| b <= max), || format!("sudoku {what}: value above {max}"))?;
            let mut g = [0u8; MAX_CELLS];
            g[..cells].copy_from_slice(bytes);
            Ok(g)
        };
        let mask = read_grid("givens mask", 1)?;
        let board = read_grid("board", size)?;
        let solution = read_grid("solution", size)?;
        let empty_start = input.u8()?;
        ensure(is_complete_valid(geo, &solution), || "sudoku solution is not a valid full grid".into())?;
        let mut givens = [0u8; MAX_CELLS];
        for i in 0..cells {
            if mask[i] == 1 {
                ensure(board[i] == solution[i], || format!("sudoku cell {i}: given digit differs from the solution"))?;
                givens[i] = board[i];
            }
        }
        let empty = givens[..cells].iter().filter(|&&g| g == 0).count();
        ensure(empty >= 1 && usize::from(empty_start) == empty, || {
            format!("sudoku: {empty_start} empty cells at start recorded, the givens leave {empty}")
        })?;
        let unique = solver::unique_solution(geo, &givens);
        ensure(unique.is_some_and(|u| u[..cells] == solution[..cells]), || {
            "sudoku givens do not have the recorded solution as their only one".into()
        })?;
        Ok(Self { geo, givens, board, solution, empty_start })
    }
}

#[cfg(test)]
mod tests;
