//! Push-optimal Sokoban solver: breadth-first search over box placements, one push per edge.
//!
//! A search node is (box cells, player cell right after the push). Nodes are expanded in FIFO
//! order, so the first solved child has the fewest pushes. Two nodes whose boxes agree and whose
//! players stand in the same connected region are the same state: the region's smallest cell is
//! the canonical player, and a node whose canonical state was already expanded is skipped. Pushes
//! onto dead squares are never generated. The Python reference (`atgrpo.envs.reference.sokoban`)
//! runs this exact algorithm, node order and budget included, so both agree even on budget misses.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use super::bits::Cells;
use super::level::Level;
use crate::parse::Dir;

/// Multiply-xorshift hasher for the u64 state keys (std's SipHash is needlessly slow here).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let z = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z ^ (z >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type KeySet = HashSet<u64, BuildHasherDefault<KeyHasher>>;

struct Node {
    boxes: Cells,
    player: u8,
    parent: u32,
    /// The push that created this node: box cell before the push, and direction.
    push_from: u8,
    push_dir: u8,
    depth: u32,
}

/// Cells the player can walk to without pushing.
pub fn reachable(level: &Level, boxes: &Cells, player: usize) -> Cells {
    let blocked = level.walls.or(boxes);
    let mut seen = Cells::default();
    seen.set(player);
    let mut stack = [0u8; 256];
    stack[0] = player as u8;
    let mut len = 1;
    while len > 0 {
        len -= 1;
        let cell = stack[len] as usize;
        for dir in Dir::ALL {
            let next = level.step(cell, dir);
            if !blocked.has(next) && !seen.has(next) {
                seen.set(next);
                stack[len] = next as u8;
                len += 1;
            }
        }
    }
    seen
}

fn key(boxes: &Cells, canonical_player: usize) -> u64 {
    // At most 4 boxes on 256 cells: 4 bytes of box cells and one of player.
    let mut k = canonical_player as u64;
    for (i, cell) in boxes.iter().enumerate() {
        k |= (cell as u64 + 1) << (8 * (i + 1));
    }
    k
}

/// Pushes of a push-optimal solution as (box cell before the push, direction), or None when the
/// level is unsolvable or more than `max_states` nodes would be needed.
pub fn solve_pushes(level: &Level, boxes: Cells, player: usize, max_states: usize) -> Option<Vec<(usize, Dir)>> {
    if boxes.and(&level.targets) == boxes {
        return Some(Vec::new());
    }
    let mut nodes = vec![Node { boxes, player: player as u8, parent: u32::MAX, push_from: 0, push_dir: 0, depth: 0 }];
    let mut expanded = KeySet::default();
    let mut next = 0;
    while next < nodes.len() {
        let (boxes, player, depth) = (nodes[next].boxes, nodes[next].player as usize, nodes[next].depth);
        let reach = reachable(level, &boxes, player);
        let canonical = reach.iter().next().expect("player cell is reachable");
        if !expanded.insert(key(&boxes, canonical)) {
            next += 1;
            continue;
        }
        for b in boxes.iter() {
            for (d, &dir) in Dir::ALL.iter().enumerate() {
                let dst = level.step(b, dir);
                let stand = (b as isize - level.offset(dir)) as usize;
                if !reach.has(stand) || level.walls.has(dst) || boxes.has(dst) || level.dead.has(dst) {
                    continue;
                }
                let mut child = boxes;
                child.unset(b);
                child.set(dst);
                nodes.push(Node {
                    boxes: child,
                    player: b as u8,
                    parent: next as u32,
                    push_from: b as u8,
                    push_dir: d as u8,
                    depth: depth + 1,
                });
                if child.and(&level.targets) == child {
                    return Some(trace(&nodes, nodes.len() - 1));
                }
                if nodes.len() > max_states {
                    return None;
                }
            }
        }
        next += 1;
    }
    None
}

fn trace(nodes: &[Node], mut i: usize) -> Vec<(usize, Dir)> {
    let mut pushes = Vec::with_capacity(nodes[i].depth as usize);
    while nodes[i].parent != u32::MAX {
        pushes.push((nodes[i].push_from as usize, Dir::ALL[nodes[i].push_dir as usize]));
        i = nodes[i].parent as usize;
    }
    pushes.reverse();
    pushes
}

/// Shortest walk (no pushes) from `from` to `to`, neighbours tried in U, D, L, R order.
fn walk(level: &Level, boxes: &Cells, from: usize, to: usize, out: &mut Vec<Dir>) -> Option<()> {
    let blocked = level.walls.or(boxes);
    let mut came: [Option<(u8, u8)>; 256] = [None; 256];
    let mut queue = std::collections::VecDeque::from([from]);
    let mut seen = Cells::default();
    seen.set(from);
    while let Some(cell) = queue.pop_front() {
        if cell == to {
            break;
        }
        for (d, &dir) in Dir::ALL.iter().enumerate() {
            let next = level.step(cell, dir);
            if !blocked.has(next) && !seen.has(next) {
                seen.set(next);
                came[next] = Some((cell as u8, d as u8));
                queue.push_back(next);
            }
        }
    }
    if !seen.has(to) {
        return None;
    }
    let start = out.len();
    let mut cell = to;
    while cell != from {
        let (prev, d) = came[cell]?;
        out.push(Dir::ALL[d as usize]);
        cell = prev as usize;
    }
    out[start..].reverse();
    Some(())
}

/// A full move list (walks and pushes) of a push-optimal solution from the given placement.
pub fn solve_moves(level: &Level, boxes: Cells, player: usize, max_states: usize) -> Option<Vec<Dir>> {
    let pushes = solve_pushes(level, boxes, player, max_states)?;
    let mut moves = Vec::new();
    let (mut boxes, mut player) = (boxes, player);
    for (b, dir) in pushes {
        let stand = (b as isize - level.offset(dir)) as usize;
        walk(level, &boxes, player, stand, &mut moves)?;
        moves.push(dir);
        boxes.unset(b);
        boxes.set(level.step(b, dir));
        player = b;
    }
    Some(moves)
}
