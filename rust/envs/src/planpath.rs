//! Plan-Path: walk from the start `A` to the goal `G` on a grid with obstacles `#`.
//!
//! Rules (mirrored by `atgrpo.envs.reference.planpath`; documented in `envs/planpath/README.md`):
//! - An answer is a move list (see `parse`). Moves run in order; a move off the grid or into an
//!   obstacle is skipped and costs `invalid_move_penalty`. Reaching the goal ends the move list,
//!   unless `stop_at_goal` is false: then every move runs and the list must end on the goal.
//! - Shaping: `local = (d_before - d_after) / d_start + n_invalid * invalid_move_penalty`, with d the
//!   BFS distance to the goal, so walking an optimal path from the start earns exactly 1.0; plus
//!   `optimal_bonus` when the list reaches the goal having run exactly `d_before` moves (a shortest
//!   walk from where it started, no illegal move: the paper's "optimal path" bonus, per answer).
//! - Solved when the agent stands on the goal. There is no terminal failure: only the turn limit
//!   ends an unsolved episode.
//! - Generation: exactly `floor(obstacle_ratio * w * h)` obstacles, start and goal on two distinct
//!   free cells, the goal reachable at BFS distance >= `min_distance`.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::codec::{ensure, Reader, Writer};
use crate::error::{EnvError, Result};
use crate::parse::{format_moves, parse_moves, Dir};
use crate::rng::{split_of_level, SplitMix64};
use crate::task::{Common, Outcome, Scratch, Split, Task};

const MAX_ATTEMPTS: usize = 10_000;
const UNREACHABLE: u16 = u16::MAX;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PlanPathConfig {
    /// Grid columns, 2..=32.
    pub width: u32,
    /// Grid rows, 2..=32.
    pub height: u32,
    /// Fraction of cells that are obstacles, 0.0..=0.8.
    pub obstacle_ratio: f64,
    /// Smallest allowed BFS distance from start to goal.
    pub min_distance: u32,
    /// Whether reaching the goal ends the move list. When false the remaining moves still run, so a
    /// long list that only passes over the goal does not count: RL cannot win by spraying moves.
    pub stop_at_goal: bool,
    /// Local reward added to an answer that reaches the goal by a shortest walk from where it
    /// started. 0 (the default) leaves the progress shaping alone.
    pub optimal_bonus: f64,
}

impl Default for PlanPathConfig {
    fn default() -> Self {
        Self { width: 10, height: 10, obstacle_ratio: 0.2, min_distance: 4, stop_at_goal: true, optimal_bonus: 0.0 }
    }
}

/// The static part of a level, shared by every fork of it.
#[derive(Debug, PartialEq)]
pub struct Level {
    pub width: usize,
    pub height: usize,
    pub blocked: Vec<bool>,
    pub start: usize,
    pub goal: usize,
    /// BFS distance of every cell to the goal (`UNREACHABLE` where there is none).
    pub dist: Vec<u16>,
}

impl Level {
    fn neighbour(&self, cell: usize, dir: Dir) -> Option<usize> {
        let (dr, dc) = dir.delta();
        let r = (cell / self.width) as i32 + dr;
        let c = (cell % self.width) as i32 + dc;
        if r < 0 || c < 0 || r >= self.height as i32 || c >= self.width as i32 {
            return None;
        }
        let next = r as usize * self.width + c as usize;
        (!self.blocked[next]).then_some(next)
    }

    /// BFS distances of every cell to the goal (`UNREACHABLE` where there is none).
    fn distances(&self) -> Vec<u16> {
        let mut dist = vec![UNREACHABLE; self.width * self.height];
        let mut queue = VecDeque::from([self.goal]);
        dist[self.goal] = 0;
        while let Some(cell) = queue.pop_front() {
            for dir in Dir::ALL {
                if let Some(next) = self.neighbour(cell, dir) {
                    if dist[next] == UNREACHABLE {
                        dist[next] = dist[cell] + 1;
                        queue.push_back(next);
                    }
                }
            }
        }
        dist
    }

    fn new(width: usize, height: usize, blocked: Vec<bool>, start: usize, goal: usize) -> Self {
        let mut level = Self { width, height, blocked, start, goal, dist: Vec::new() };
        level.dist = level.distances();
        level
    }

    /// Canonical bytes: the split hash input and the snapshot body.
    fn canonical_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(6 + self.blocked.len());
        b.push(self.width as u8);
        b.push(self.height as u8);
        b.extend(self.blocked.iter().map(|&x| u8::from(x)));
        b.extend_from_slice(&(self.start as u16).to_le_bytes());
        b.extend_from_slice(&(self.goal as u16).to_le_bytes());
        b
    }
}

#[derive(Clone, Debug)]
pub struct PlanPath {
    level: Arc<Level>,
    pos: usize,
    stop_at_goal: bool,
    optimal_bonus: f64,
}

impl PlanPath {
    pub fn level(&self) -> &Level {
        &self.level
    }
    pub fn position(&self) -> usize {
        self.pos
    }
    fn at(cfg: &PlanPathConfig, level: Level, pos: usize) -> Self {
        Self { level: Arc::new(level), pos, stop_at_goal: cfg.stop_at_goal, optimal_bonus: cfg.optimal_bonus }
    }
}

impl Task for PlanPath {
    type Config = PlanPathConfig;
    const NAME: &'static str = "planpath";
    const TAG: u8 = 1;

    fn check_config(cfg: &PlanPathConfig, _common: &Common) -> Result<()> {
        let invalid = |msg: String| Err(EnvError::InvalidConfig { task: Self::NAME, msg });
        if !(2..=32).contains(&cfg.width) || !(2..=32).contains(&cfg.height) {
            return invalid(format!("width and height must be in 2..=32, got {}x{}", cfg.width, cfg.height));
        }
        if !(0.0..=0.8).contains(&cfg.obstacle_ratio) {
            return invalid(format!("obstacle_ratio must be in 0.0..=0.8, got {}", cfg.obstacle_ratio));
        }
        let cells = cfg.width * cfg.height;
        if cfg.min_distance < 1 || cfg.min_distance > cells / 2 {
            return invalid(format!("min_distance must be in 1..={}, got {}", cells / 2, cfg.min_distance));
        }
        if !cfg.optimal_bonus.is_finite() {
            return invalid(format!("optimal_bonus must be finite, got {}", cfg.optimal_bonus));
        }
        Ok(())
    }

    fn generate(cfg: &PlanPathConfig, seed: u64, split: Split) -> Result<Self> {
        let (w, h) = (cfg.width as usize, cfg.height as usize);
        let n = w * h;
        let n_obstacles = (cfg.obstacle_ratio * n as f64) as usize;
        let mut rng = SplitMix64::for_level(seed, split);
        let mut cells: Vec<usize> = Vec::with_capacity(n);
        for _ in 0..MAX_ATTEMPTS {
            cells.clear();
            cells.extend(0..n);
            rng.partial_shuffle(&mut cells, 0, n_obstacles + 2);
            let mut blocked = vec![false; n];
            for &c in &cells[..n_obstacles] {
                blocked[c] = true;
            }
            let (start, goal) = (cells[n_obstacles], cells[n_obstacles + 1]);
            let level = Level::new(w, h, blocked, start, goal);
            let d = level.dist[start];
            if d == UNREACHABLE || u32::from(d) < cfg.min_distance {
                continue;
            }
            if split_of_level(&level.canonical_bytes()) != split {
                continue;
            }
            return Ok(Self::at(cfg, level, start));
        }
        Err(EnvError::Generation(format!(
            "no {w}x{h} plan-path level with obstacle_ratio {} and min_distance {} after {MAX_ATTEMPTS} attempts",
            cfg.obstacle_ratio, cfg.min_distance
        )))
    }

    fn step(&mut self, common: &Common, action: Option<&str>, scratch: &mut Scratch) -> Outcome {
        let parsed = action.is_some_and(|text| parse_moves(text, common.max_moves as usize, &mut scratch.moves));
        if !parsed {
            return Outcome { local: common.parse_penalty, ..Outcome::default() };
        }
        let level = &*self.level;
        let before = level.dist[self.pos];
        let (mut invalid, mut ran) = (0u32, 0usize);
        for &dir in &scratch.moves {
            ran += 1;
            match level.neighbour(self.pos, dir) {
                Some(next) => self.pos = next,
                None => invalid += 1,
            }
            if self.stop_at_goal && self.pos == level.goal {
                break;
            }
        }
        let after = level.dist[self.pos];
        let progress = (f64::from(before) - f64::from(after)) / f64::from(level.dist[level.start]);
        let solved = self.pos == level.goal;
        let shortest = solved && ran == usize::from(before);
        Outcome {
            local: progress
                + f64::from(invalid) * common.invalid_move_penalty
                + if shortest { self.optimal_bonus } else { 0.0 },
            solved,
            failed: false,
            valid: invalid == 0,
        }
    }

    fn render(&self, out: &mut String) {
        let level = &*self.level;
        for r in 0..level.height {
            if r > 0 {
                out.push('\n');
            }
            for c in 0..level.width {
                let cell = r * level.width + c;
                out.push(if cell == self.pos {
                    'A'
                } else if cell == level.goal {
                    'G'
                } else if level.blocked[cell] {
                    '#'
                } else {
                    '.'
                });
            }
        }
    }

    fn solve(&self) -> Option<String> {
        let level = &*self.level;
        let mut cell = self.pos;
        let mut moves = Vec::new();
        while cell != level.goal {
            let d = level.dist[cell];
            let (dir, next) = Dir::ALL
                .iter()
                .find_map(|&dir| level.neighbour(cell, dir).filter(|&n| level.dist[n] + 1 == d).map(|n| (dir, n)))?;
            moves.push(dir);
            cell = next;
        }
        Some(format_moves(&moves))
    }

    fn optimal_len(&self) -> u32 {
        u32::from(self.level.dist[self.level.start])
    }

    fn encode(&self, out: &mut Writer) {
        out.bytes(&self.level.canonical_bytes());
        out.u16(self.pos as u16);
    }

    fn decode(cfg: &PlanPathConfig, input: &mut Reader<'_>) -> Result<Self> {
        let body = input.bytes()?;
        let pos = usize::from(input.u16()?);
        let (w, h) = (cfg.width as usize, cfg.height as usize);
        let n = w * h;
        ensure(body.len() == n + 6, || format!("level body of {} bytes, expected {}", body.len(), n + 6))?;
        ensure(body[0] as usize == w && body[1] as usize == h, || {
            format!("level is {}x{}, this pool is {w}x{h}", body[0], body[1])
        })?;
        let cells = &body[2..2 + n];
        ensure(cells.iter().all(|&b| b <= 1), || "obstacle bytes must be 0 or 1".into())?;
        let blocked: Vec<bool> = cells.iter().map(|&b| b == 1).collect();
        let start = usize::from(u16::from_le_bytes([body[n + 2], body[n + 3]]));
        let goal = usize::from(u16::from_le_bytes([body[n + 4], body[n + 5]]));
        for (name, cell) in [("start", start), ("goal", goal), ("position", pos)] {
            ensure(cell < n && !blocked[cell], || format!("{name} cell {cell} is outside the grid or blocked"))?;
        }
        let level = Level::new(w, h, blocked, start, goal);
        ensure(level.dist[start] != UNREACHABLE && level.dist[start] > 0, || "goal not reachable from start".into())?;
        Ok(Self::at(cfg, level, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make(seed: u64) -> PlanPath {
        PlanPath::generate(&PlanPathConfig::default(), seed, Split::Train).unwrap()
    }

    #[test]
    fn solver_plan_is_optimal_and_solves() {
        let common = Common::default();
        let mut scratch = Scratch::default();
        for seed in 0..200 {
            let mut env = make(seed);
            let plan = env.solve().unwrap();
            let mut moves = Vec::new();
            assert!(parse_moves(&plan, 1000, &mut moves));
            assert_eq!(moves.len() as u32, env.optimal_len());
            let out = env.step(&common, Some(&plan), &mut scratch);
            assert!(out.solved && out.valid);
            assert_eq!(out.local, 1.0);
        }
    }

    #[test]
    fn generation_is_deterministic_and_respects_config() {
        for seed in 0..100 {
            let (a, b) = (make(seed), make(seed));
            assert_eq!(a.level, b.level);
            assert!(a.optimal_len() >= PlanPathConfig::default().min_distance);
            assert_eq!(a.level.blocked.iter().filter(|&&x| x).count(), 20);
        }
    }

    #[test]
    fn walls_cost_the_penalty_and_keep_position() {
        let common = Common::default();
        let mut scratch = Scratch::default();
        let mut env = make(3);
        // Walk into the border: at most one of the two opposite moves can be legal from a corner walk.
        let out = env.step(&common, Some(&format!("#### [{}]", "U, ".repeat(40))), &mut scratch);
        assert!(!out.valid);
        assert!(out.local < 0.0 || env.position() != env.level.start);
        let bad = env.step(&common, Some("no moves here"), &mut scratch);
        assert_eq!(bad.local, common.parse_penalty);
    }

    #[test]
    fn the_optimal_bonus_pays_only_a_shortest_walk_to_the_goal() {
        let common = Common { invalid_move_penalty: 0.0, ..Common::default() };
        let mut scratch = Scratch::default();
        for stop_at_goal in [true, false] {
            let cfg = PlanPathConfig { stop_at_goal, optimal_bonus: 0.5, ..PlanPathConfig::default() };
            let mut detours_solved = 0;
            for seed in 0..50 {
                let fresh = PlanPath::generate(&cfg, seed, Split::Train).unwrap();
                let plan = fresh.solve().unwrap();
                let mut env = fresh.clone();
                assert_eq!(env.step(&common, Some(&plan), &mut scratch).local, 1.5, "shortest: progress 1 + bonus");
                // The same walk with a wasted move first (into a wall or there and back) is no bonus.
                let mut env = fresh.clone();
                let detour = format!("[U,D,{}", plan.trim_start_matches("#### ["));
                let out = env.step(&common, Some(&detour), &mut scratch);
                if out.solved {
                    assert_eq!(out.local, 1.0, "seed {seed}: a longer walk earns progress only");
                    detours_solved += 1;
                }
                // Half the way: progress, no bonus, and the rest from there earns the bonus again.
                let mut moves = Vec::new();
                assert!(parse_moves(&plan, 1000, &mut moves));
                let half = moves.len() / 2;
                if half > 0 {
                    let mut env = fresh.clone();
                    let out = env.step(&common, Some(&format_moves(&moves[..half])), &mut scratch);
                    assert!(!out.solved && out.local < 1.0);
                    let rest = env.step(&common, Some(&env.solve().unwrap()), &mut scratch);
                    assert!(rest.solved);
                    assert!((rest.local - (0.5 + (moves.len() - half) as f64 / moves.len() as f64)).abs() < 1e-12);
                }
            }
            assert!(detours_solved > 10, "the detour case ran: {detours_solved} of 50");
        }
        let bad = PlanPathConfig { optimal_bonus: f64::INFINITY, ..PlanPathConfig::default() };
        assert!(PlanPath::check_config(&bad, &common).is_err());
    }

    #[test]
    fn walking_past_the_goal_counts_only_when_the_list_stops_there() {
        let common = Common::default();
        let mut scratch = Scratch::default();
        for stop_at_goal in [true, false] {
            let cfg = PlanPathConfig { stop_at_goal, ..PlanPathConfig::default() };
            let mut solved = 0;
            for seed in 0..50 {
                let mut env = PlanPath::generate(&cfg, seed, Split::Train).unwrap();
                let plan = env.solve().unwrap();
                // One extra move after the optimal plan: it leaves the goal unless it is blocked.
                let detour = format!("{},U,D,U]", plan.trim_end_matches(']'));
                let out = env.step(&common, Some(&detour), &mut scratch);
                solved += usize::from(out.solved);
            }
            if stop_at_goal {
                assert_eq!(solved, 50, "the goal ends the list");
            } else {
                assert!(solved < 50, "with stop_at_goal off, moves after the goal still run");
            }
        }
    }
}
