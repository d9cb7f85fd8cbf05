//! `Pool<T>`: N environments of one task, owned here, driven in batches.
//!
//! Invariants:
//! - Every batch call validates all its env ids (range, duplicates, readiness) before touching any
//!   env, so a failed call changes nothing.
//! - A slot is `Empty` until its first reset; `step` on an empty or finished slot is an
//!   `EnvNotReady` error (reset it first). `fork` copies the whole slot, episode counters included.
//! - After `close`, every call is a `PoolClosed` error.
//! - Results are columns in the order of the given env ids; the caller owns the returned buffers.

use crate::codec::{ensure, Reader, Writer};
use crate::error::{EnvError, Result};
use crate::task::{Common, Scratch, Split, Task};

/// Magic and format version at the start of every snapshot.
const SNAPSHOT_MAGIC: [u8; 2] = *b"AT";
const SNAPSHOT_VERSION: u8 = 1;

#[derive(Clone)]
pub struct Episode<T> {
    pub state: T,
    pub steps: u32,
    pub done: bool,
    pub success: bool,
}

/// Texts of a batch, one per env, stored back to back (no allocation per env).
#[derive(Default, Debug)]
pub struct TextColumn {
    pub buf: String,
    pub ends: Vec<usize>,
}

impl TextColumn {
    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..self.ends[i]]
    }
    pub fn len(&self) -> usize {
        self.ends.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

#[derive(Default, Debug)]
pub struct StepColumns {
    pub obs: TextColumn,
    pub reward: Vec<f64>,
    pub reward_team: Vec<f64>,
    pub reward_local: Vec<f64>,
    pub done: Vec<bool>,
    pub success: Vec<bool>,
    pub truncated: Vec<bool>,
    pub valid: Vec<bool>,
}

impl StepColumns {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            obs: TextColumn { buf: String::with_capacity(n * 128), ends: Vec::with_capacity(n) },
            reward: Vec::with_capacity(n),
            reward_team: Vec::with_capacity(n),
            reward_local: Vec::with_capacity(n),
            done: Vec::with_capacity(n),
            success: Vec::with_capacity(n),
            truncated: Vec::with_capacity(n),
            valid: Vec::with_capacity(n),
        }
    }
}

pub struct Pool<T: Task> {
    config: T::Config,
    common: Common,
    slots: Vec<Option<Episode<T>>>,
    scratch: Scratch,
    /// Marks used to detect duplicate ids without allocating per call.
    seen: Vec<u32>,
    epoch: u32,
    closed: bool,
}

impl<T: Task> Pool<T> {
    pub fn new(num_envs: usize, config: T::Config, common: Common) -> Result<Self> {
        if num_envs == 0 || num_envs > (1 << 24) {
            return Err(EnvError::InvalidConfig {
                task: T::NAME,
                msg: format!("num_envs must be in 1..=16777216, got {num_envs}"),
            });
        }
        T::check_config(&config, &common)?;
        Ok(Self {
            config,
            common,
            slots: vec![None; num_envs],
            scratch: Scratch::default(),
            seen: vec![0; num_envs],
            epoch: 0,
            closed: false,
        })
    }

    pub fn config(&self) -> &T::Config {
        &self.config
    }
    pub fn common(&self) -> &Common {
        &self.common
    }
    pub fn num_envs(&self) -> usize {
        self.slots.len()
    }
    pub fn close(&mut self) {
        self.closed = true;
        self.slots = Vec::new();
        self.seen = Vec::new();
    }
    pub fn episode(&self, id: usize) -> Option<&Episode<T>> {
        self.slots.get(id).and_then(Option::as_ref)
    }

    fn check_open(&self) -> Result<()> {
        if self.closed {
            Err(EnvError::PoolClosed)
        } else {
            Ok(())
        }
    }

    /// Validates ids: open pool, in range, and (when `unique`) no duplicates.
    pub fn check_ids(&mut self, ids: &[i64], unique: bool) -> Result<Vec<usize>> {
        self.check_open()?;
        let n = self.slots.len();
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.seen.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            if id < 0 || id as u64 >= n as u64 {
                return Err(EnvError::InvalidEnvId { id, num_envs: n });
            }
            let idx = id as usize;
            if unique {
                if self.seen[idx] == self.epoch {
                    return Err(EnvError::DuplicateEnvId { id: idx });
                }
                self.seen[idx] = self.epoch;
            }
            out.push(idx);
        }
        Ok(out)
    }

    fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
        if expected == got {
            Ok(())
        } else {
            Err(EnvError::LengthMismatch { what, expected, got })
        }
    }

    fn live(&self, id: usize) -> Result<&Episode<T>> {
        self.slots[id].as_ref().ok_or(EnvError::EnvNotReady { id, reason: "it was never reset" })
    }

    /// Generates fresh levels. On a generation error no slot is changed.
    pub fn reset(&mut self, ids: &[i64], seeds: &[u64], split: Split, obs: &mut TextColumn) -> Result<()> {
        let ids = self.check_ids(ids, true)?;
        Self::check_len("seeds", ids.len(), seeds.len())?;
        let mut fresh = Vec::with_capacity(ids.len());
        for &seed in seeds {
            fresh.push(T::generate(&self.config, seed, split)?);
        }
        obs.clear();
        for (&id, state) in ids.iter().zip(fresh) {
            state.render(&mut obs.buf);
            obs.ends.push(obs.buf.len());
            self.slots[id] = Some(Episode { state, steps: 0, done: false, success: false });
        }
        Ok(())
    }

    pub fn step(&mut self, ids: &[i64], actions: &[Option<&str>], out: &mut StepColumns) -> Result<()> {
        let ids = self.check_ids(ids, true)?;
        Self::check_len("actions", ids.len(), actions.len())?;
        for &id in &ids {
            if self.live(id)?.done {
                return Err(EnvError::EnvNotReady { id, reason: "its episode is over; reset it first" });
            }
        }
        let common = &self.common;
        for (&id, &action) in ids.iter().zip(actions) {
            let ep = self.slots[id].as_mut().expect("checked above");
            let outcome = ep.state.step(common, action, &mut self.scratch);
            ep.steps += 1;
            let team = if outcome.solved { common.success_bonus } else { 0.0 };
            let truncated = !outcome.solved && !outcome.failed && ep.steps >= common.max_steps;
            ep.done = outcome.solved || outcome.failed || truncated;
            ep.success = outcome.solved;
            out.reward.push(common.alpha * team + outcome.local);
            out.reward_team.push(team);
            out.reward_local.push(outcome.local);
            out.done.push(ep.done);
            out.success.push(outcome.solved);
            out.truncated.push(truncated);
            out.valid.push(outcome.valid);
            ep.state.render(&mut out.obs.buf);
            out.obs.ends.push(out.obs.buf.len());
        }
        Ok(())
    }

    /// Copies env `src`'s whole episode into every env of `dsts` (tree sampling's K branches).
    pub fn fork(&mut self, src: i64, dsts: &[i64]) -> Result<()> {
        let src = self.check_ids(&[src], true)?[0];
        let dsts = self.check_ids(dsts, true)?;
        self.live(src)?;
        for &dst in &dsts {
            if dst == src {
                continue;
            }
            // Split the borrow: the source slot is read while a different slot is written.
            let (from, to) = if src < dst {
                let (a, b) = self.slots.split_at_mut(dst);
                (&a[src], &mut b[0])
            } else {
                let (a, b) = self.slots.split_at_mut(src);
                (&b[0], &mut a[dst])
            };
            match (from, to) {
                (Some(f), Some(t)) => t.clone_from(f),
                (Some(f), t) => *t = Some(f.clone()),
                (None, _) => unreachable!("source checked live"),
            }
        }
        Ok(())
    }

    pub fn render(&mut self, ids: &[i64], obs: &mut TextColumn) -> Result<()> {
        let ids = self.check_ids(ids, false)?;
        obs.clear();
        for &id in &ids {
            self.live(id)?.state.render(&mut obs.buf);
            obs.ends.push(obs.buf.len());
        }
        Ok(())
    }

    /// Optimal answer from each env's current state (None where unsolvable), and the level's
    /// optimal length from its start.
    pub fn solve(&mut self, ids: &[i64]) -> Result<(Vec<Option<String>>, Vec<u32>)> {
        let ids = self.check_ids(ids, false)?;
        let mut plans = Vec::with_capacity(ids.len());
        let mut lens = Vec::with_capacity(ids.len());
        for &id in &ids {
            let ep = self.live(id)?;
            plans.push(if ep.success { Some(String::new()) } else { ep.state.solve() });
            lens.push(ep.state.optimal_len());
        }
        Ok((plans, lens))
    }

    /// Per-env status columns: (steps taken, done, success).
    pub fn status(&mut self, ids: &[i64]) -> Result<(Vec<u32>, Vec<bool>, Vec<bool>)> {
        let ids = self.check_ids(ids, false)?;
        let mut steps = Vec::with_capacity(ids.len());
        let mut done = Vec::with_capacity(ids.len());
        let mut success = Vec::with_capacity(ids.len());
        for &id in &ids {
            let ep = self.live(id)?;
            steps.push(ep.steps);
            done.push(ep.done);
            success.push(ep.success);
        }
        Ok((steps, done, success))
    }

    pub fn snapshot(&mut self, ids: &[i64]) -> Result<Vec<Vec<u8>>> {
        let ids = self.check_ids(ids, false)?;
        let mut out = Vec::with_capacity(ids.len());
        for &id in &ids {
            let ep = self.live(id)?;
            let mut w = Writer::default();
            w.bytes.extend_from_slice(&SNAPSHOT_MAGIC);
            w.u8(SNAPSHOT_VERSION);
            w.u8(T::TAG);
            w.u32(ep.steps);
            w.u8(u8::from(ep.done) | (u8::from(ep.success) << 1));
            ep.state.encode(&mut w);
            out.push(w.bytes);
        }
        Ok(out)
    }

    /// Restores snapshots; all blobs are decoded before any slot changes.
    pub fn restore(&mut self, ids: &[i64], blobs: &[&[u8]]) -> Result<()> {
        let ids = self.check_ids(ids, true)?;
        Self::check_len("snapshots", ids.len(), blobs.len())?;
        let mut decoded = Vec::with_capacity(blobs.len());
        for blob in blobs {
            decoded.push(self.decode_episode(blob)?);
        }
        for (&id, ep) in ids.iter().zip(decoded) {
            self.slots[id] = Some(ep);
        }
        Ok(())
    }

    fn decode_episode(&self, blob: &[u8]) -> Result<Episode<T>> {
        let mut r = Reader::new(blob);
        let magic = [r.u8()?, r.u8()?];
        ensure(magic == SNAPSHOT_MAGIC, || "not an atgrpo snapshot (bad magic)".into())?;
        let version = r.u8()?;
        ensure(version == SNAPSHOT_VERSION, || format!("snapshot format {version}, expected {SNAPSHOT_VERSION}"))?;
        let tag = r.u8()?;
        ensure(tag == T::TAG, || format!("snapshot of another task (tag {tag}), this pool runs {}", T::NAME))?;
        let steps = r.u32()?;
        let flags = r.u8()?;
        ensure(flags < 4, || format!("bad flags byte {flags}"))?;
        let state = T::decode(&self.config, &mut r)?;
        r.finish()?;
        Ok(Episode { state, steps, done: flags & 1 != 0, success: flags & 2 != 0 })
    }
}
