//! Sokoban: push every box `$` onto a target `.`; the player `@` walks and pushes, never pulls.
//!
//! Rules (mirrored by `atgrpo.envs.reference.sokoban`; documented in `envs/sokoban/README.md`):
//! - An answer is a move list. A move into a wall, or a push against a wall or a second box, is
//!   skipped and costs `invalid_move_penalty`. Solving, or pushing a box onto a dead square (a
//!   terminal failure), ends the move list.
//! - Shaping: `local = (on_target_after - on_target_before) / boxes + n_invalid * invalid_move_penalty`.
//! - Solved when every box is on a target; `failed` when a box sits on a dead square.
//! - Levels come from reverse play (a random walk from the solved position that pulls any box it
//!   walks away from; the most scrambled placement along the walk is kept), so every level is solvable; the push-optimal solver then verifies it and records its optimal push count, and
//!   only levels with `min_pushes <= optimal <= max_pushes` are kept.

mod bits;
mod level;
mod solver;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use bits::Cells;
pub use level::Level;
pub use solver::{reachable, solve_moves, solve_pushes};

use crate::codec::{ensure, Reader, Writer};
use crate::error::{EnvError, Result};
use crate::parse::{format_moves, parse_moves, Dir};
use crate::rng::{split_of_level, SplitMix64};
use crate::task::{Common, Outcome, Scratch, Split, Task};

const MAX_ATTEMPTS: usize = 10_000;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SokobanConfig {
    /// Grid columns including the border wall, 5..=16.
    pub width: u32,
    /// Grid rows including the border wall, 5..=16.
    pub height: u32,
    /// Number of boxes (and targets), 1..=4.
    pub boxes: u32,
    /// Fraction of interior cells turned into walls, 0.0..=0.5.
    pub wall_ratio: f64,
    /// Random player moves (with random pulls) played backwards from the solved position.
    pub reverse_steps: u32,
    /// Fewest pushes an accepted level may need.
    pub min_pushes: u32,
    /// Most pushes an accepted level may need.
    pub max_pushes: u32,
    /// Node budget of the solver, at generation and in `solve`.
    pub max_solver_states: u32,
}

impl Default for SokobanConfig {
    fn default() -> Self {
        Self {
            width: 6,
            height: 6,
            boxes: 1,
            wall_ratio: 0.15,
            reverse_steps: 40,
            min_pushes: 2,
            max_pushes: 40,
            max_solver_states: 200_000,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Sokoban {
    level: Arc<Level>,
    boxes: Cells,
    player: usize,
    max_solver_states: usize,
}

impl Sokoban {
    pub fn level(&self) -> &Level {
        &self.level
    }
    pub fn boxes(&self) -> Cells {
        self.boxes
    }
    pub fn player(&self) -> usize {
        self.player
    }
}

fn interior_cells(w: usize, h: usize) -> Vec<usize> {
    (1..h - 1).flat_map(|r| (1..w - 1).map(move |c| r * w + c)).collect()
}

/// Sum over boxes of the Manhattan distance to the nearest target: how scrambled a placement is.
fn spread(level: &Level, boxes: &Cells) -> usize {
    let w = level.width;
    boxes
        .iter()
        .map(|b| level.targets.iter().map(|t| (b / w).abs_diff(t / w) + (b % w).abs_diff(t % w)).min().unwrap_or(0))
        .sum()
}

fn wall_count(cfg: &SokobanConfig) -> usize {
    let interior = (cfg.width as usize - 2) * (cfg.height as usize - 2);
    (cfg.wall_ratio * interior as f64) as usize
}

impl Task for Sokoban {
    type Config = SokobanConfig;
    const NAME: &'static str = "sokoban";
    const TAG: u8 = 3;

    fn check_config(cfg: &SokobanConfig, _common: &Common) -> Result<()> {
        let invalid = |msg: String| Err(EnvError::InvalidConfig { task: Self::NAME, msg });
        if !(5..=16).contains(&cfg.width) || !(5..=16).contains(&cfg.height) {
            return invalid(format!("width and height must be in 5..=16, got {}x{}", cfg.width, cfg.height));
        }
        if !(1..=4).contains(&cfg.boxes) {
            return invalid(format!("boxes must be in 1..=4, got {}", cfg.boxes));
        }
        if !(0.0..=0.5).contains(&cfg.wall_ratio) {
            return invalid(format!("wall_ratio must be in 0.0..=0.5, got {}", cfg.wall_ratio));
        }
        let interior = ((cfg.width - 2) * (cfg.height - 2)) as usize;
        if interior < wall_count(cfg) + cfg.boxes as usize + 2 {
            return invalid(format!(
                "a {}x{} room with these walls has no space for {} boxes",
                cfg.width, cfg.height, cfg.boxes
            ));
        }
        if cfg.min_pushes < 1 || cfg.min_pushes > cfg.max_pushes {
            return invalid(format!("need 1 <= min_pushes <= max_pushes, got {}..={}", cfg.min_pushes, cfg.max_pushes));
        }
        if !(1_000..=50_000_000).contains(&cfg.max_solver_states) {
            return invalid(format!("max_solver_states must be in 1000..=50000000, got {}", cfg.max_solver_states));
        }
        Ok(())
    }

    fn generate(cfg: &SokobanConfig, seed: u64, split: Split) -> Result<Self> {
        let (w, h) = (cfg.width as usize, cfg.height as usize);
        let n_walls = wall_count(cfg);
        let n_boxes = cfg.boxes as usize;
        let interior = interior_cells(w, h);
        let mut border = Cells::default();
        (0..w * h).filter(|&cell| level::is_border(w, h, cell)).for_each(|cell| border.set(cell));
        let mut rng = SplitMix64::for_level(seed, split);
        let mut cells = interior.clone();
        for _ in 0..MAX_ATTEMPTS {
            cells.copy_from_slice(&interior);
            rng.partial_shuffle(&mut cells, 0, n_walls + n_boxes + 1);
            let mut walls = border;
            cells[..n_walls].iter().for_each(|&c| walls.set(c));
            let mut targets = Cells::default();
            cells[n_walls..n_walls + n_boxes].iter().for_each(|&c| targets.set(c));
            let mut player = cells[n_walls + n_boxes];
            let mut level = Level {
                width: w,
                height: h,
                walls,
                targets,
                dead: Cells::default(),
                num_boxes: cfg.boxes,
                start_player: player,
                start_boxes: targets,
                optimal_pushes: 0,
            };
            // Every floor cell must be reachable, or the room has pockets nobody can enter.
            if reachable(&level, &Cells::default(), player).count() as usize != interior.len() - n_walls {
                continue;
            }
            let mut boxes = targets;
            // Keep the placement along the walk whose boxes stand farthest from the targets: the
            // walk's end is often a box dragged back next to where it started.
            let mut best = (0, boxes, player);
            for _ in 0..cfg.reverse_steps {
                let dir = Dir::ALL[rng.below(4)];
                let next = level.step(player, dir);
                if walls.has(next) || boxes.has(next) {
                    continue;
                }
                let behind = (player as isize - level.offset(dir)) as usize;
                if boxes.has(behind) {
                    boxes.unset(behind);
                    boxes.set(player);
                }
                player = next;
                let score = spread(&level, &boxes);
                if score > best.0 {
                    best = (score, boxes, player);
                }
            }
            (boxes, player) = (best.1, best.2);
            if boxes == targets {
                continue;
            }
            if split_of_level(&level.canonical_bytes(&boxes, player)) != split {
                continue;
            }
            level.dead = level.dead_squares();
            let Some(pushes) = solve_pushes(&level, boxes, player, cfg.max_solver_states as usize) else {
                continue;
            };
            let optimal = pushes.len() as u32;
            if optimal < cfg.min_pushes || optimal > cfg.max_pushes {
                continue;
            }
            level.start_player = player;
            level.start_boxes = boxes;
            level.optimal_pushes = optimal;
            return Ok(Self {
                level: Arc::new(level),
                boxes,
                player,
                max_solver_states: cfg.max_solver_states as usize,
            });
        }
        Err(EnvError::Generation(format!(
            "no {w}x{h} sokoban level with {n_boxes} boxes and {}..={} pushes after {MAX_ATTEMPTS} attempts",
            cfg.min_pushes, cfg.max_pushes
        )))
    }

    fn step(&mut self, common: &Common, action: Option<&str>, scratch: &mut Scratch) -> Outcome {
        let parsed = action.is_some_and(|text| parse_moves(text, common.max_moves as usize, &mut scratch.moves));
        if !parsed {
            return Outcome { local: common.parse_penalty, ..Outcome::default() };
        }
        let level = &*self.level;
        let on_before = self.boxes.and(&level.targets).count();
        let mut invalid = 0u32;
        let mut failed = false;
        for &dir in &scratch.moves {
            let next = level.step(self.player, dir);
            if level.walls.has(next) {
                invalid += 1;
                continue;
            }
            if self.boxes.has(next) {
                let beyond = level.step(next, dir);
                if level.walls.has(beyond) || self.boxes.has(beyond) {
                    invalid += 1;
                    continue;
                }
                self.boxes.unset(next);
                self.boxes.set(beyond);
                failed = level.dead.has(beyond);
            }
            self.player = next;
            if failed || self.boxes.and(&level.targets) == self.boxes {
                break;
            }
        }
        let on_after = self.boxes.and(&level.targets).count();
        let progress = (f64::from(on_after) - f64::from(on_before)) / f64::from(level.num_boxes);
        Outcome {
            local: progress + f64::from(invalid) * common.invalid_move_penalty,
            solved: on_after == level.num_boxes,
            failed,
            valid: invalid == 0,
        }
    }

    fn render(&self, out: &mut String) {
        self.level.render(&self.boxes, self.player, out);
    }

    fn solve(&self) -> Option<String> {
        solve_moves(&self.level, self.boxes, self.player, self.max_solver_states).map(|m| format_moves(&m))
    }

    fn optimal_len(&self) -> u32 {
        self.level.optimal_pushes
    }

    fn encode(&self, out: &mut Writer) {
        let level = &*self.level;
        out.bytes(&level.canonical_bytes(&level.start_boxes, level.start_player));
        out.u32(level.optimal_pushes);
        out.bytes(&self.boxes.iter().map(|c| c as u8).collect::<Vec<_>>());
        out.u8(self.player as u8);
    }

    fn decode(cfg: &SokobanConfig, input: &mut Reader<'_>) -> Result<Self> {
        let (w, h) = (cfg.width as usize, cfg.height as usize);
        let n = w * h;
        let nb = cfg.boxes as usize;
        let body = input.bytes()?;
        let optimal_pushes = input.u32()?;
        let box_bytes = input.bytes()?;
        let player = usize::from(input.u8()?);
        ensure(body.len() == 2 + n + nb + 1, || {
            format!("level body of {} bytes, expected {}", body.len(), 2 + n + nb + 1)
        })?;
        ensure(body[0] as usize == w && body[1] as usize == h, || {
            format!("level is {}x{}, this pool is {w}x{h}", body[0], body[1])
        })?;
        let (mut walls, mut targets) = (Cells::default(), Cells::default());
        for (cell, &code) in body[2..2 + n].iter().enumerate() {
            match code {
                0 => {}
                1 => walls.set(cell),
                2 => targets.set(cell),
                _ => return Err(EnvError::Snapshot(format!("cell code {code} at {cell}"))),
            }
        }
        ensure(targets.count() as usize == nb, || format!("{} targets, this pool has {nb} boxes", targets.count()))?;
        let cells_of = |bytes: &[u8], what: &str| -> Result<Cells> {
            let mut set = Cells::default();
            for &b in bytes {
                let c = usize::from(b);
                ensure(c < n && !walls.has(c) && !set.has(c), || {
                    format!("{what} cell {c} is outside, on a wall or repeated")
                })?;
                set.set(c);
            }
            ensure(set.count() as usize == nb, || format!("{} {what} cells, expected {nb}", set.count()))?;
            Ok(set)
        };
        let start_boxes = cells_of(&body[2 + n..2 + n + nb], "start box")?;
        let start_player = usize::from(body[2 + n + nb]);
        let boxes = cells_of(box_bytes, "box")?;
        let mut level = Level {
            width: w,
            height: h,
            walls,
            targets,
            dead: Cells::default(),
            num_boxes: cfg.boxes,
            start_player,
            start_boxes,
            optimal_pushes,
        };
        ensure((0..n).filter(|&c| level.is_border(c)).all(|c| walls.has(c)), || "the border must be walls".into())?;
        for (what, p, b) in [("start player", start_player, &start_boxes), ("player", player, &boxes)] {
            ensure(p < n && !walls.has(p) && !b.has(p), || {
                format!("{what} cell {p} is outside, on a wall or on a box")
            })?;
        }
        level.dead = level.dead_squares();
        Ok(Self { level: Arc::new(level), boxes, player, max_solver_states: cfg.max_solver_states as usize })
    }
}

#[cfg(test)]
mod tests;
