//! Parsing of a Sudoku answer. Like `crate::parse`, it never fails loudly: `None` means unparseable
//! and the task charges its parse penalty. `atgrpo.envs.reference.sudoku` mirrors these rules.
//!
//! - Texts longer than `MAX_ACTION_BYTES` are unparseable.
//! - The answer region is the text after the last `####`, to the end of the text (it may span
//!   lines), or the whole text when there is no `####`.
//! - A region containing `(` is a list of triples `(row, col, value)`, e.g.
//!   `[(1, 2, 3), (4, 4, 1)]`. Between triples only whitespace, `,`, `[` and `]` may appear; inside
//!   a triple, exactly three unsigned decimal numbers separated by whitespace or `,`. Numbers are
//!   read saturating at 255 (range checks belong to the step, where they are invalid moves). At least
//!   one and at most `max_moves` triples.
//! - Any other region is a full grid: exactly `side * side` cells in row-major order, where a cell is
//!   one character, a digit `0..=side` or `.`/`_` (`0`, `.`, `_` = empty), and whitespace, `,`, `[`,
//!   `]`, `|`, `-`, `+` separate. `1234` is four cells.
//! - Any other character (a letter, `-1`, a non-ASCII byte) makes the answer unparseable.
//!
//! Grid answers always hold `side * side` cells, so `max_moves` only bounds triple lists.

use super::board::{render_grid, Geometry};
use crate::parse::MAX_ACTION_BYTES;

pub const ANSWER_MARKER: &str = "####";

/// How the assignments of a parsed answer are to be applied (see `Sudoku::step`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `(row, col, value)` triples, 1-based; value 0 is out of range.
    Triples,
    /// One assignment per cell in row-major order; value 0 clears the cell.
    Grid,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// The part of `text` that holds the answer (see the module docs).
pub fn answer_region(text: &str) -> &str {
    match text.rfind(ANSWER_MARKER) {
        Some(i) => &text[i + ANSWER_MARKER.len()..],
        None => text,
    }
}

/// Parses an answer into `out` (cleared first) as (row, col, value) with 1-based row and column.
pub fn parse_answer(text: &str, side: usize, max_moves: usize, out: &mut Vec<(u8, u8, u8)>) -> Option<Mode> {
    out.clear();
    if text.len() > MAX_ACTION_BYTES {
        return None;
    }
    let region = answer_region(text).as_bytes();
    let (ok, mode) = if region.contains(&b'(') {
        (parse_triples(region, max_moves, out), Mode::Triples)
    } else {
        (parse_grid(region, side, out), Mode::Grid)
    };
    if ok {
        Some(mode)
    } else {
        out.clear();
        None
    }
}

fn parse_triples(region: &[u8], max_moves: usize, out: &mut Vec<(u8, u8, u8)>) -> bool {
    let mut inside = false;
    let mut nums = [0u8; 3];
    let mut n_nums = 0;
    // The number being read, saturated at 255 (u16 so `* 10 + 9` cannot overflow first).
    let mut cur: Option<u16> = None;
    for &b in region {
        if !inside {
            match b {
                b'(' => {
                    inside = true;
                    n_nums = 0;
                }
                b',' | b'[' | b']' => {}
                _ if is_space(b) => {}
                _ => return false,
            }
            continue;
        }
        match b {
            b'0'..=b'9' => cur = Some((cur.unwrap_or(0) * 10 + u16::from(b - b'0')).min(255)),
            b',' | b')' => {}
            _ if is_space(b) => {}
            _ => return false,
        }
        if !b.is_ascii_digit() {
            if let Some(v) = cur.take() {
                if n_nums == 3 {
                    return false;
                }
                nums[n_nums] = v as u8;
                n_nums += 1;
            }
        }
        if b == b')' {
            if n_nums != 3 || out.len() >= max_moves {
                return false;
            }
            out.push((nums[0], nums[1], nums[2]));
            inside = false;
        }
    }
    !inside && !out.is_empty()
}

fn parse_grid(region: &[u8], side: usize, out: &mut Vec<(u8, u8, u8)>) -> bool {
    let cells = side * side;
    let max_digit = b'0' + side as u8;
    for &b in region {
        let v = match b {
            b'.' | b'_' => 0,
            b'0'..=b'9' if b <= max_digit => b - b'0',
            b',' | b'[' | b']' | b'|' | b'-' | b'+' => continue,
            _ if is_space(b) => continue,
            _ => return false,
        };
        let i = out.len();
        if i == cells {
            return false;
        }
        out.push(((i / side) as u8 + 1, (i % side) as u8 + 1, v));
    }
    out.len() == cells
}

/// The canonical grid answer: the marker, a newline, then the grid as `render` shows it.
pub fn format_grid(geo: Geometry, grid: &[u8]) -> String {
    let mut s = String::with_capacity(ANSWER_MARKER.len() + 1 + 2 * geo.cells());
    s.push_str(ANSWER_MARKER);
    s.push('\n');
    render_grid(geo, grid, &mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    type Cells = Vec<(u8, u8, u8)>;

    fn parse(text: &str, side: usize) -> Option<(Mode, Cells)> {
        let mut out = Vec::new();
        parse_answer(text, side, 8, &mut out).map(|m| (m, out))
    }

    #[test]
    fn triples() {
        let (mode, t) = parse("I fill two cells.\n#### [(1, 2, 3), (4,4,1)]\n", 4).unwrap();
        assert_eq!(mode, Mode::Triples);
        assert_eq!(t, vec![(1, 2, 3), (4, 4, 1)]);
        // Out-of-range numbers parse (the step rejects them); huge ones saturate.
        assert_eq!(parse("(0 9 12345678901234567890)", 4).unwrap().1, vec![(0, 9, 255)]);
        // The last marker wins, and the region runs over several lines.
        assert_eq!(parse("#### (1,1,1)\n#### (2,2,2),\n(3,3,3)", 4).unwrap().1, vec![(2, 2, 2), (3, 3, 3)]);
    }

    #[test]
    fn bad_triples() {
        for bad in [
            "#### ()",
            "#### (1, 2)",
            "#### (1, 2, 3, 4)",
            "#### (1, 2, 3",
            "#### (1, 2, 3) done",
            "#### (1, -2, 3)",
            "#### ((1, 2, 3))",
            "#### (1; 2; 3)",
            "#### (r1, c2, 3)",
            "#### (1, 2, 3)\u{00e9}",
        ] {
            assert_eq!(parse(bad, 4), None, "{bad:?}");
        }
        let many = "(1,1,1)".repeat(9);
        assert_eq!(parse(&many, 4), None, "more than max_moves triples");
        assert!(parse(&"(1,1,1)".repeat(8), 4).is_some());
    }

    #[test]
    fn grids() {
        let (mode, cells) = parse("#### \n1 . 3 4\n3 4 _ 2\n0 0 0 0\n4 3 2 1\n", 4).unwrap();
        assert_eq!(mode, Mode::Grid);
        assert_eq!(cells.len(), 16);
        assert_eq!(cells[0], (1, 1, 1));
        assert_eq!(cells[1], (1, 2, 0));
        assert_eq!(cells[6], (2, 3, 0));
        assert_eq!(cells[15], (4, 4, 1));
        let compact = parse("[[1,2,3,4],[3,4,1,2],[2,1,4,3],[4,3,2,1]]", 4).unwrap().1;
        let dense = parse("1234|3412\n-----+----\n2143 4321", 4).unwrap().1;
        assert_eq!(compact, dense);
        assert!(parse(&"5".repeat(81), 9).is_some());
    }

    #[test]
    fn bad_grids() {
        for bad in [
            "",
            "####",
            "1 2 3 4",
            "1234 3412 2143 432",
            "1234 3412 2143 43210",
            "1234 3412 2143 4325",
            "Answer: 1234 3412 2143 4321",
            "1234/3412/2143/4321",
        ] {
            assert_eq!(parse(bad, 4), None, "{bad:?}");
        }
        let huge = format!("{}####1234341221434321", " ".repeat(MAX_ACTION_BYTES));
        assert_eq!(parse(&huge, 4), None, "oversized");
    }

    #[test]
    fn canonical_grid_round_trips() {
        let geo = Geometry::new(4).unwrap();
        let mut grid = [0u8; 81];
        grid[..16].copy_from_slice(&[1, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 1]);
        let text = format_grid(geo, &grid);
        assert_eq!(text, "####\n1 2 3 4\n3 4 1 2\n2 1 4 3\n4 3 2 1");
        let (mode, cells) = parse(&text, 4).unwrap();
        assert_eq!(mode, Mode::Grid);
        assert!(cells.iter().all(|&(r, c, v)| grid[usize::from(r - 1) * 4 + usize::from(c - 1)] == v));
    }
}
