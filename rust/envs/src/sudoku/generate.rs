//! Puzzle generation. `atgrpo.envs.reference.sudoku` repeats it call for call, so the same seed gives
//! the same puzzle in both languages.
//!
//! 1. Fill a random complete grid: randomized backtracking over the cells in row-major order; at each
//!    cell the allowed digits are listed ascending, `rng.shuffle`d, and tried in that order.
//! 2. Keep the grid only if `split_of_level(grid)` is the requested split (the grid's digits `1..=side`
//!    as bytes, row-major), else go back to 1. The split is a property of the *solution*, so a train
//!    and an eval puzzle never share one.
//! 3. `rng.shuffle` all cell indices and visit them in that order while more than `target` givens
//!    remain: blank the cell, and put it back if the puzzle would stop having a unique solution.
//!    The puzzle has the unique solution S before the step, so it stays unique without cell c exactly
//!    when no solution has cell c != S[c]: one existence search with S[c] forbidden at c.
//!
//! When no further cell can be removed, the puzzle keeps more than `target` givens (a minimal
//! puzzle). Every returned puzzle has exactly one solution.

use super::board::{bit, Geometry, Grid, MAX_CELLS, MAX_SIDE};
use super::solver::Solver;
use crate::rng::{split_of_level, SplitMix64};
use crate::task::Split;

/// Fill attempts before giving up; each is kept with probability 1/2, so this is never reached.
pub const MAX_ATTEMPTS: usize = 64;

/// A generated puzzle: the givens (0 = empty) and the unique solution.
pub struct Generated {
    pub puzzle: Grid,
    pub solution: Grid,
}

struct Filler<'a> {
    geo: Geometry,
    rng: &'a mut SplitMix64,
    rows: [u16; MAX_SIDE],
    cols: [u16; MAX_SIDE],
    boxes: [u16; MAX_SIDE],
    grid: Grid,
}

impl Filler<'_> {
    fn fill(&mut self, cell: usize) -> bool {
        if cell == self.geo.cells() {
            return true;
        }
        let [r, c, b] = self.geo.units(cell);
        let used = self.rows[r] | self.cols[c] | self.boxes[b];
        let mut digits = [0u8; MAX_SIDE];
        let mut n = 0;
        for d in 1..=self.geo.side() as u8 {
            if used & bit(d) == 0 {
                digits[n] = d;
                n += 1;
            }
        }
        self.rng.shuffle(&mut digits[..n]);
        for &d in &digits[..n] {
            let m = bit(d);
            self.rows[r] |= m;
            self.cols[c] |= m;
            self.boxes[b] |= m;
            self.grid[cell] = d;
            if self.fill(cell + 1) {
                return true;
            }
            self.rows[r] &= !m;
            self.cols[c] &= !m;
            self.boxes[b] &= !m;
        }
        self.grid[cell] = 0;
        false
    }
}

/// Step 1: a uniformly shuffled backtracking fill of the empty grid (always succeeds).
pub fn random_full_grid(geo: Geometry, rng: &mut SplitMix64) -> Grid {
    let mut f =
        Filler { geo, rng, rows: [0; MAX_SIDE], cols: [0; MAX_SIDE], boxes: [0; MAX_SIDE], grid: [0; MAX_CELLS] };
    let filled = f.fill(0);
    debug_assert!(filled, "the empty grid has solutions, so the backtracking fill finds one");
    f.grid
}

/// Step 3: removes givens from a complete grid in `rng` order down to `target`, keeping uniqueness.
pub fn remove_clues(geo: Geometry, solution: &Grid, target: usize, rng: &mut SplitMix64) -> Grid {
    let cells = geo.cells();
    let mut order = [0u8; MAX_CELLS];
    for (i, slot) in order[..cells].iter_mut().enumerate() {
        *slot = i as u8;
    }
    rng.shuffle(&mut order[..cells]);
    let mut puzzle = *solution;
    let mut count = cells;
    for &cell in &order[..cells] {
        if count <= target {
            break;
        }
        let cell = usize::from(cell);
        puzzle[cell] = 0;
        let mut other = Solver::new(geo, &puzzle).expect("a subset of a valid grid never clashes");
        other.forbid(cell, solution[cell]);
        if other.solve() {
            puzzle[cell] = solution[cell];
        } else {
            count -= 1;
        }
    }
    puzzle
}

/// Steps 1-3 for `seed` in `split`; None only after `MAX_ATTEMPTS` fills of the wrong split.
pub fn generate(geo: Geometry, target: usize, seed: u64, split: Split) -> Option<Generated> {
    let mut rng = SplitMix64::for_level(seed, split);
    for _ in 0..MAX_ATTEMPTS {
        let solution = random_full_grid(geo, &mut rng);
        if split_of_level(&solution[..geo.cells()]) != split {
            continue;
        }
        let puzzle = remove_clues(geo, &solution, target, &mut rng);
        return Some(Generated { puzzle, solution });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::board::is_complete_valid;
    use super::*;

    /// Plain row-major backtracking, no bitmasks and no cell ordering: independent of `Solver`.
    fn naive_count(geo: Geometry, grid: &mut Grid, limit: usize) -> usize {
        let side = geo.side();
        let Some(cell) = grid[..geo.cells()].iter().position(|&d| d == 0) else {
            return 1;
        };
        let (r, c) = (cell / side, cell % side);
        let bs = if side == 4 { 2 } else { 3 };
        let mut total = 0;
        for d in 1..=side as u8 {
            let clash = (0..side).any(|i| {
                grid[r * side + i] == d
                    || grid[i * side + c] == d
                    || grid[(r / bs * bs + i / bs) * side + c / bs * bs + i % bs] == d
            });
            if clash {
                continue;
            }
            grid[cell] = d;
            total += naive_count(geo, grid, limit - total);
            grid[cell] = 0;
            if total >= limit {
                break;
            }
        }
        total
    }

    fn check_puzzles(side: u32, target: usize, seeds: u64) {
        let geo = Geometry::new(side).unwrap();
        for seed in 0..seeds {
            for split in [Split::Train, Split::Eval] {
                let g = generate(geo, target, seed, split).unwrap();
                assert!(is_complete_valid(geo, &g.solution));
                assert_eq!(split_of_level(&g.solution[..geo.cells()]), split);
                let mut p = g.puzzle;
                assert_eq!(naive_count(geo, &mut p, 2), 1, "seed {seed} {split:?}: not unique");
                let givens = g.puzzle[..geo.cells()].iter().filter(|&&d| d != 0).count();
                assert!(givens >= target, "seed {seed}: {givens} givens < target {target}");
                for cell in 0..geo.cells() {
                    assert!(g.puzzle[cell] == 0 || g.puzzle[cell] == g.solution[cell]);
                }
            }
        }
    }

    #[test]
    fn every_4x4_puzzle_has_one_solution() {
        check_puzzles(4, 6, 500);
        check_puzzles(4, 4, 200);
    }

    #[test]
    fn every_9x9_puzzle_has_one_solution() {
        check_puzzles(9, 30, 40);
        check_puzzles(9, 17, 10);
    }

    #[test]
    fn default_targets_are_reached() {
        for (side, target, seeds) in [(4u32, 6usize, 300u64), (9, 30, 100)] {
            let geo = Geometry::new(side).unwrap();
            for seed in 0..seeds {
                let g = generate(geo, target, seed, Split::Train).unwrap();
                let givens = g.puzzle[..geo.cells()].iter().filter(|&&d| d != 0).count();
                assert_eq!(givens, target, "{side}x{side} seed {seed}");
            }
        }
    }

    #[test]
    fn deterministic_and_split_disjoint() {
        let geo = Geometry::new(4).unwrap();
        let a = generate(geo, 6, 42, Split::Train).unwrap();
        let b = generate(geo, 6, 42, Split::Train).unwrap();
        assert_eq!(a.puzzle, b.puzzle);
        let mut train = std::collections::HashSet::new();
        let mut eval = std::collections::HashSet::new();
        for seed in 0..300 {
            train.insert(generate(geo, 6, seed, Split::Train).unwrap().solution[..16].to_vec());
            eval.insert(generate(geo, 6, seed, Split::Eval).unwrap().solution[..16].to_vec());
        }
        assert!(train.is_disjoint(&eval));
        // 288 grids exist; both splits see a good share of theirs.
        assert!(train.len() > 100 && eval.len() > 100, "{} {}", train.len(), eval.len());
    }

    /// `cargo test --release -p atgrpo-envs sudoku_perf -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn sudoku_perf_report() {
        use std::time::Instant;
        for (side, target, n) in [(9u32, 30usize, 5000u64), (9, 17, 2000), (4, 6, 50000)] {
            let geo = Geometry::new(side).unwrap();
            let t = Instant::now();
            let mut total = 0usize;
            let mut puzzles = Vec::new();
            for seed in 0..n {
                let g = generate(geo, target, seed, Split::Train).unwrap();
                total += g.puzzle[..geo.cells()].iter().filter(|&&d| d != 0).count();
                if puzzles.len() < 1000 {
                    puzzles.push(g.puzzle);
                }
            }
            let dt = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut solved = 0;
            for _ in 0..10 {
                for p in &puzzles {
                    let mut s = Solver::new(geo, p).unwrap();
                    solved += usize::from(s.solve());
                }
            }
            let solve_us = t.elapsed().as_secs_f64() * 1e6 / solved as f64;
            println!(
                "{side}x{side} target {target}: {:.0} puzzles/s, mean givens {:.1}, solve {solve_us:.2} us",
                n as f64 / dt,
                total as f64 / n as f64
            );
        }
    }
}
