//! Exact Sudoku search: bitmask rows/columns/boxes, most-constrained empty cell first.
//!
//! The search only ever answers questions whose answer does not depend on the search order
//! ("is there a solution?", "how many, up to k?", "the solution" of a puzzle that has exactly one),
//! so the Python reference may search differently and still agree.

use super::board::{bit, digit_of, Geometry, Grid, MAX_CELLS, MAX_SIDE};

#[derive(Clone)]
pub struct Solver {
    geo: Geometry,
    rows: [u16; MAX_SIDE],
    cols: [u16; MAX_SIDE],
    boxes: [u16; MAX_SIDE],
    grid: Grid,
    /// Digits a cell may take besides the unit constraints (all, except where `forbid` narrowed it).
    allow: [u16; MAX_CELLS],
    /// Empty cells; `empties[..k]` are filled at search depth `k`.
    empties: [u8; MAX_CELLS],
    n_empty: usize,
}

impl Solver {
    /// A solver for `puzzle` (0 = empty), or None if its givens already clash in a unit.
    pub fn new(geo: Geometry, puzzle: &[u8]) -> Option<Self> {
        let mut s = Self {
            geo,
            rows: [0; MAX_SIDE],
            cols: [0; MAX_SIDE],
            boxes: [0; MAX_SIDE],
            grid: [0; MAX_CELLS],
            allow: [geo.full(); MAX_CELLS],
            empties: [0; MAX_CELLS],
            n_empty: 0,
        };
        for (cell, &d) in puzzle[..geo.cells()].iter().enumerate() {
            if d == 0 {
                s.empties[s.n_empty] = cell as u8;
                s.n_empty += 1;
                continue;
            }
            if usize::from(d) > geo.side() {
                return None;
            }
            let [r, c, b] = geo.units(cell);
            let m = bit(d);
            if (s.rows[r] | s.cols[c] | s.boxes[b]) & m != 0 {
                return None;
            }
            s.place(cell, r, c, b, m);
        }
        Some(s)
    }

    /// Excludes `digit` from the (empty) `cell`: the search then only finds solutions that differ
    /// from a known one at that cell.
    pub fn forbid(&mut self, cell: usize, digit: u8) {
        self.allow[cell] &= !bit(digit);
    }

    /// The grid: after a successful `solve`, a solution.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// Finds one solution (left in `grid`); false if there is none.
    pub fn solve(&mut self) -> bool {
        self.search(0)
    }

    /// Number of solutions, counting stops at `limit`.
    pub fn count(&mut self, limit: usize) -> usize {
        let mut found = 0;
        self.count_from(0, limit, &mut found);
        found
    }

    #[inline]
    fn place(&mut self, cell: usize, r: usize, c: usize, b: usize, m: u16) {
        self.rows[r] |= m;
        self.cols[c] |= m;
        self.boxes[b] |= m;
        self.grid[cell] = digit_of(m);
    }

    #[inline]
    fn unplace(&mut self, cell: usize, r: usize, c: usize, b: usize, m: u16) {
        self.rows[r] &= !m;
        self.cols[c] &= !m;
        self.boxes[b] &= !m;
        self.grid[cell] = 0;
    }

    /// Moves the remaining empty cell with the fewest candidates to position `k` and returns its
    /// candidate mask (0: a dead end).
    #[inline]
    fn pick(&mut self, k: usize) -> u16 {
        let mut best = k;
        let mut best_mask = 0;
        let mut best_count = u32::MAX;
        for i in k..self.n_empty {
            let cell = usize::from(self.empties[i]);
            let [r, c, b] = self.geo.units(cell);
            let m = self.allow[cell] & !(self.rows[r] | self.cols[c] | self.boxes[b]);
            let n = m.count_ones();
            if n < best_count {
                (best, best_mask, best_count) = (i, m, n);
                if n <= 1 {
                    break;
                }
            }
        }
        self.empties.swap(k, best);
        best_mask
    }

    fn search(&mut self, k: usize) -> bool {
        if k == self.n_empty {
            return true;
        }
        let mut m = self.pick(k);
        let cell = usize::from(self.empties[k]);
        let [r, c, b] = self.geo.units(cell);
        while m != 0 {
            let low = m & m.wrapping_neg();
            m ^= low;
            self.place(cell, r, c, b, low);
            if self.search(k + 1) {
                return true;
            }
            self.unplace(cell, r, c, b, low);
        }
        false
    }

    fn count_from(&mut self, k: usize, limit: usize, found: &mut usize) {
        if k == self.n_empty {
            *found += 1;
            return;
        }
        let mut m = self.pick(k);
        let cell = usize::from(self.empties[k]);
        let [r, c, b] = self.geo.units(cell);
        while m != 0 && *found < limit {
            let low = m & m.wrapping_neg();
            m ^= low;
            self.place(cell, r, c, b, low);
            self.count_from(k + 1, limit, found);
            self.unplace(cell, r, c, b, low);
        }
    }
}

/// The solution of `puzzle` if it has exactly one, else None.
pub fn unique_solution(geo: Geometry, puzzle: &[u8]) -> Option<Grid> {
    let mut solver = Solver::new(geo, puzzle)?;
    if !solver.solve() {
        return None;
    }
    let solution = *solver.grid();
    let mut counter = Solver::new(geo, puzzle)?;
    (counter.count(2) == 1).then_some(solution)
}

#[cfg(test)]
mod tests {
    use super::super::board::is_complete_valid;
    use super::*;

    /// A classic 9x9 puzzle (30 givens) and its solution.
    pub const PUZZLE: &str = "530070000600195000098000060800060003400803001700020006060000280000419005000080079";
    pub const SOLUTION: &str = "534678912672195348198342567859761423426853791713924856961537284287419635345286179";

    pub fn grid(s: &str) -> Grid {
        let mut g = [0u8; MAX_CELLS];
        for (i, ch) in s.bytes().enumerate() {
            g[i] = ch - b'0';
        }
        g
    }

    #[test]
    fn solves_classic_puzzle() {
        let geo = Geometry::new(9).unwrap();
        let mut s = Solver::new(geo, &grid(PUZZLE)).unwrap();
        assert!(s.solve());
        assert_eq!(s.grid()[..81], grid(SOLUTION)[..81]);
        assert!(is_complete_valid(geo, s.grid()));
        assert_eq!(unique_solution(geo, &grid(PUZZLE)).map(|g| g[..81].to_vec()), Some(grid(SOLUTION)[..81].to_vec()));
    }

    #[test]
    fn counts_and_forbids() {
        let geo = Geometry::new(4).unwrap();
        // The empty 4x4 grid has 288 solutions.
        assert_eq!(Solver::new(geo, &[0; MAX_CELLS]).unwrap().count(1000), 288);
        assert_eq!(Solver::new(geo, &[0; MAX_CELLS]).unwrap().count(2), 2);
        assert!(unique_solution(geo, &[0; MAX_CELLS]).is_none());
        // Forbidding the only possible digit of a cell leaves no solution.
        let g9 = Geometry::new(9).unwrap();
        let mut puzzle = grid(PUZZLE);
        let mut s = Solver::new(g9, &puzzle).unwrap();
        s.forbid(2, grid(SOLUTION)[2]);
        assert!(!s.solve());
        // Clashing givens are rejected up front.
        puzzle[2] = 5;
        assert!(Solver::new(g9, &puzzle).is_none());
    }

    #[test]
    fn unsolvable_puzzle() {
        let geo = Geometry::new(4).unwrap();
        // Row 0 needs a 4 in cell 3, but column 3 already has one.
        let mut p = [0u8; MAX_CELLS];
        p[..16].copy_from_slice(&[1, 2, 3, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(!Solver::new(geo, &p).unwrap().solve());
        assert!(unique_solution(geo, &p).is_none());
    }
}
