//! Grid geometry and bitmask helpers shared by the generator, the solver and the rules.
//!
//! A grid is `[u8; MAX_CELLS]` in row-major order; only the first `size * size` cells are used.
//! A cell holds 0 (empty) or a digit `1..=size`. Digit `d` is bit `d - 1` of a `u16` mask.

/// Cells of the largest supported grid (9x9).
pub const MAX_CELLS: usize = 81;
/// Side of the largest supported grid.
pub const MAX_SIDE: usize = 9;

pub type Grid = [u8; MAX_CELLS];

/// (row, column, box) of every cell, for one grid size.
type Units = [[u8; 3]; MAX_CELLS];

const fn units(side: usize, box_side: usize) -> Units {
    let mut table = [[0u8; 3]; MAX_CELLS];
    let mut cell = 0;
    while cell < side * side {
        let (r, c) = (cell / side, cell % side);
        table[cell] = [r as u8, c as u8, ((r / box_side) * box_side + c / box_side) as u8];
        cell += 1;
    }
    table
}

static UNITS_4: Units = units(4, 2);
static UNITS_9: Units = units(9, 3);

/// The shape of a grid: its side (4 or 9) and the unit of every cell (precomputed, so hot loops never
/// divide).
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    side: u8,
    units: &'static Units,
}

impl PartialEq for Geometry {
    fn eq(&self, other: &Self) -> bool {
        self.side == other.side
    }
}
impl Eq for Geometry {}

impl Geometry {
    /// The geometry of a `side` x `side` grid; only 4 (2x2 boxes) and 9 (3x3 boxes) exist.
    pub fn new(side: u32) -> Option<Self> {
        match side {
            4 => Some(Self { side: 4, units: &UNITS_4 }),
            9 => Some(Self { side: 9, units: &UNITS_9 }),
            _ => None,
        }
    }

    pub fn side(self) -> usize {
        usize::from(self.side)
    }
    pub fn cells(self) -> usize {
        self.side() * self.side()
    }
    /// Mask with one bit per digit `1..=side`.
    pub fn full(self) -> u16 {
        (1u16 << self.side) - 1
    }
    /// (row, column, box) of `cell`.
    #[inline]
    pub fn units(self, cell: usize) -> [usize; 3] {
        let [r, c, b] = self.units[cell];
        [usize::from(r), usize::from(c), usize::from(b)]
    }
}

#[inline]
pub fn bit(digit: u8) -> u16 {
    1u16 << (digit - 1)
}

#[inline]
pub fn digit_of(bit: u16) -> u8 {
    bit.trailing_zeros() as u8 + 1
}

/// True if the first `geo.cells()` cells form a complete grid with every row, column and box
/// holding each digit exactly once.
pub fn is_complete_valid(geo: Geometry, grid: &[u8]) -> bool {
    let mut units = [[0u16; MAX_SIDE]; 3];
    for (cell, &d) in grid[..geo.cells()].iter().enumerate() {
        if d == 0 || usize::from(d) > geo.side() {
            return false;
        }
        for (kind, u) in geo.units(cell).into_iter().enumerate() {
            units[kind][u] |= bit(d);
        }
    }
    // n digits in n cells of a unit cover every digit exactly when they are all distinct.
    units.iter().all(|kind| kind[..geo.side()].iter().all(|&m| m == geo.full()))
}

/// Appends the grid as text: cells separated by spaces, `.` for empty, rows separated by `\n`
/// (no trailing newline). E.g. `1 . 3 4\n3 4 . 2\n...`.
pub fn render_grid(geo: Geometry, grid: &[u8], out: &mut String) {
    let side = geo.side();
    for (i, &d) in grid[..geo.cells()].iter().enumerate() {
        if i > 0 {
            out.push(if i % side == 0 { '\n' } else { ' ' });
        }
        out.push(if d == 0 { '.' } else { char::from(b'0' + d) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_of_corner_and_centre_cells() {
        let g4 = Geometry::new(4).unwrap();
        assert_eq!(g4.units(0), [0, 0, 0]);
        assert_eq!(g4.units(15), [3, 3, 3]);
        assert_eq!(g4.units(6), [1, 2, 1]);
        let g9 = Geometry::new(9).unwrap();
        assert_eq!(g9.units(40), [4, 4, 4]);
        assert_eq!(g9.units(80), [8, 8, 8]);
        assert_eq!(g9.units(29), [3, 2, 3]);
        assert!(Geometry::new(16).is_none());
    }

    #[test]
    fn validity_of_full_grids() {
        let g4 = Geometry::new(4).unwrap();
        let mut grid = [0u8; MAX_CELLS];
        grid[..16].copy_from_slice(&[1, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 1]);
        assert!(is_complete_valid(g4, &grid));
        grid.swap(0, 1); // breaks two columns
        assert!(!is_complete_valid(g4, &grid));
        grid.swap(0, 1);
        grid[5] = 0;
        assert!(!is_complete_valid(g4, &grid));
    }

    #[test]
    fn render_format() {
        let g4 = Geometry::new(4).unwrap();
        let mut grid = [0u8; MAX_CELLS];
        grid[..16].copy_from_slice(&[1, 0, 3, 4, 3, 4, 0, 2, 0, 0, 0, 0, 4, 3, 2, 1]);
        let mut s = String::new();
        render_grid(g4, &grid, &mut s);
        assert_eq!(s, "1 . 3 4\n3 4 . 2\n. . . .\n4 3 2 1");
    }
}
