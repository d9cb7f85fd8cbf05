//! The static part of a Sokoban level (walls, targets, dead squares), shared by all forks.

use super::bits::Cells;
use crate::parse::Dir;

/// Whether `cell` lies on the outer ring of a `width` x `height` grid (always wall).
pub fn is_border(width: usize, height: usize, cell: usize) -> bool {
    let (r, c) = (cell / width, cell % width);
    r == 0 || c == 0 || r + 1 == height || c + 1 == width
}

#[derive(Debug, PartialEq)]
pub struct Level {
    pub width: usize,
    pub height: usize,
    pub walls: Cells,
    pub targets: Cells,
    /// Floor cells from which a lone box can never reach a target; a box pushed there is lost.
    pub dead: Cells,
    pub num_boxes: u32,
    pub start_player: usize,
    pub start_boxes: Cells,
    /// Push-optimal solution length from the start, found by the solver at generation.
    pub optimal_pushes: u32,
}

impl Level {
    /// Index offset of one step in `dir`. Borders are walls, so an interior cell's neighbour is in range.
    #[inline]
    pub fn offset(&self, dir: Dir) -> isize {
        match dir {
            Dir::Up => -(self.width as isize),
            Dir::Down => self.width as isize,
            Dir::Left => -1,
            Dir::Right => 1,
        }
    }

    #[inline]
    pub fn step(&self, cell: usize, dir: Dir) -> usize {
        (cell as isize + self.offset(dir)) as usize
    }

    pub fn is_border(&self, cell: usize) -> bool {
        is_border(self.width, self.height, cell)
    }

    /// Cells from which a box can be pushed to some target on an otherwise empty board (found by
    /// pulling boxes away from every target); every other floor cell is dead.
    pub fn dead_squares(&self) -> Cells {
        let mut live = self.targets;
        let mut stack: Vec<usize> = self.targets.iter().collect();
        while let Some(cell) = stack.pop() {
            for dir in Dir::ALL {
                let from = self.step(cell, dir);
                let player = self.step(from, dir);
                if !self.walls.has(from) && !self.walls.has(player) && !live.has(from) {
                    live.set(from);
                    stack.push(from);
                }
            }
        }
        let mut dead = Cells::default();
        for cell in 0..self.width * self.height {
            if !self.walls.has(cell) && !live.has(cell) {
                dead.set(cell);
            }
        }
        dead
    }

    /// Canonical bytes of the level with a given box/player placement: split hash input and
    /// snapshot body. One byte per cell (0 floor, 1 wall, 2 target), then the boxes, then the player.
    pub fn canonical_bytes(&self, boxes: &Cells, player: usize) -> Vec<u8> {
        let n = self.width * self.height;
        let mut b = Vec::with_capacity(4 + n + self.num_boxes as usize);
        b.push(self.width as u8);
        b.push(self.height as u8);
        for cell in 0..n {
            b.push(if self.walls.has(cell) {
                1
            } else if self.targets.has(cell) {
                2
            } else {
                0
            });
        }
        b.extend(boxes.iter().map(|c| c as u8));
        b.push(player as u8);
        b
    }

    pub fn render(&self, boxes: &Cells, player: usize, out: &mut String) {
        for r in 0..self.height {
            if r > 0 {
                out.push('\n');
            }
            for c in 0..self.width {
                let cell = r * self.width + c;
                let target = self.targets.has(cell);
                out.push(if self.walls.has(cell) {
                    '#'
                } else if cell == player {
                    if target {
                        '+'
                    } else {
                        '@'
                    }
                } else if boxes.has(cell) {
                    if target {
                        '*'
                    } else {
                        '$'
                    }
                } else if target {
                    '.'
                } else {
                    '_'
                });
            }
        }
    }
}
