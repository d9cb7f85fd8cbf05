//! Token-level broadcast of per-sample advantages and packing of samples into micro-batches.
//!
//! Samples are variable-length token sequences (prompt then response) stored flat, CSR style:
//! sample i is `tokens[offsets[i]..offsets[i + 1]]`, its first `prompt_lens[i]` tokens are the prompt.
//! Invariants checked by [`Samples::validate`] (typed errors, never a panic): `offsets` has n + 1
//! entries, starts at 0, never decreases and ends at `tokens.len()`; every sample has at least one token;
//! `0 <= prompt_lens[i] <= len(i)`; advantages are finite.
//!
//! `loss_mask[t]` is true when token t is a response token (position >= prompt length). The learner
//! aligns it with the logits that predict token t (the usual one-step shift); this module does not shift.
//! Token advantages are the sample's advantage (cast to f32) on response tokens, 0 elsewhere.

use crate::error::{KernelError, Result};

/// Borrowed view of a batch of samples (see the module docs for the layout).
#[derive(Debug, Clone, Copy)]
pub struct Samples<'a> {
    pub tokens: &'a [i64],
    /// n + 1 entries.
    pub offsets: &'a [i64],
    pub prompt_lens: &'a [i64],
    /// One advantage per sample.
    pub advantages: &'a [f64],
}

impl Samples<'_> {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks every invariant of the module docs.
    pub fn validate(&self) -> Result<()> {
        if self.offsets.is_empty() {
            return Err(arg("offsets", "must have n + 1 entries (at least [0])".into()));
        }
        let n = self.len();
        shape("prompt_lens", n, self.prompt_lens.len())?;
        shape("advantages", n, self.advantages.len())?;
        if self.offsets[0] != 0 {
            return Err(arg("offsets", format!("must start at 0, got {}", self.offsets[0])));
        }
        if self.offsets[n] as u64 != self.tokens.len() as u64 {
            let msg = format!("must end at len(tokens) = {}, got {}", self.tokens.len(), self.offsets[n]);
            return Err(arg("offsets", msg));
        }
        for i in 0..n {
            let len = self.offsets[i + 1] - self.offsets[i];
            if len <= 0 {
                let msg = format!("sample {i} has {len} tokens (offsets must increase; empty samples are not allowed)");
                return Err(arg("offsets", msg));
            }
            let p = self.prompt_lens[i];
            if p < 0 || p > len {
                return Err(arg("prompt_lens", format!("sample {i}: prompt length {p} is outside 0..={len}")));
            }
            if !self.advantages[i].is_finite() {
                return Err(arg("advantages", format!("sample {i}: advantage {} is not finite", self.advantages[i])));
            }
        }
        Ok(())
    }

    // Valid only after `validate`.
    fn span(&self, i: usize) -> (usize, usize, usize) {
        let (start, end) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        (start, end, self.prompt_lens[i] as usize)
    }
}

/// Splits samples into micro-batches of at most `max_tokens` tokens each.
///
/// First-fit decreasing: samples in order of decreasing length (ties: lower index first) go into the
/// first micro-batch with room, found in O(log B) by a max-tree over remaining capacities. The result is
/// deterministic; micro-batches are in order of creation and each lists its indices in increasing order.
/// Errors: `InvalidArgument` if `max_tokens <= 0` or a length is negative; `SampleTooLong` for a sample
/// longer than `max_tokens`.
pub fn plan_microbatches(lengths: &[i64], max_tokens: i64) -> Result<Vec<Vec<i64>>> {
    if max_tokens <= 0 {
        return Err(arg("max_tokens", format!("must be > 0, got {max_tokens}")));
    }
    for (index, &len) in lengths.iter().enumerate() {
        if len < 0 {
            return Err(arg("lengths", format!("sample {index} has negative length {len}")));
        }
        if len > max_tokens {
            return Err(KernelError::SampleTooLong { index, len: len as usize, max_tokens: max_tokens as usize });
        }
    }
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i])); // stable: ties keep index order
    let mut tree = RoomTree::new(lengths.len());
    let mut bins: Vec<Vec<i64>> = Vec::new();
    for i in order {
        let b = match tree.first_with_room(lengths[i]) {
            Some(b) => b,
            None => {
                bins.push(Vec::new());
                tree.set(bins.len() - 1, max_tokens);
                bins.len() - 1
            }
        };
        tree.take(b, lengths[i]);
        bins[b].push(i as i64);
    }
    bins.iter_mut().for_each(|b| b.sort_unstable());
    Ok(bins)
}

/// Max segment tree over bins' remaining capacity; unopened bins hold -1 so they never match.
struct RoomTree {
    size: usize,
    node: Vec<i64>,
}

impl RoomTree {
    fn new(bins: usize) -> Self {
        let size = bins.next_power_of_two().max(1);
        Self { size, node: vec![-1; 2 * size] }
    }

    fn set(&mut self, bin: usize, room: i64) {
        let mut k = bin + self.size;
        self.node[k] = room;
        while k > 1 {
            k /= 2;
            self.node[k] = self.node[2 * k].max(self.node[2 * k + 1]);
        }
    }

    fn take(&mut self, bin: usize, tokens: i64) {
        let room = self.node[bin + self.size] - tokens;
        self.set(bin, room);
    }

    fn first_with_room(&self, tokens: i64) -> Option<usize> {
        if self.node[1] < tokens {
            return None;
        }
        let mut k = 1;
        while k < self.size {
            k = if self.node[2 * k] >= tokens { 2 * k } else { 2 * k + 1 };
        }
        Some(k - self.size)
    }
}

/// Right-padded micro-batch, row-major `[batch, width]` buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct Padded {
    pub batch: usize,
    /// Length of the longest selected sample.
    pub width: usize,
    pub input_ids: Vec<i64>,
    pub attention_mask: Vec<bool>,
    pub loss_mask: Vec<bool>,
    pub token_advantages: Vec<f32>,
}

/// Rows `indices` of `samples`, right-padded with `pad_id` to the longest of them.
///
/// Errors: those of [`Samples::validate`], `InvalidArgument` for an index outside `0..n`.
pub fn pad_batch(samples: Samples<'_>, indices: &[i64], pad_id: i64) -> Result<Padded> {
    samples.validate()?;
    let rows = checked_indices(indices, samples.len())?;
    let width = rows.iter().map(|&i| samples.span(i)).map(|(s, e, _)| e - s).max().unwrap_or(0);
    let cells = rows.len() * width;
    let mut out = Padded {
        batch: rows.len(),
        width,
        input_ids: vec![pad_id; cells],
        attention_mask: vec![false; cells],
        loss_mask: vec![false; cells],
        token_advantages: vec![0.0; cells],
    };
    for (row, &i) in rows.iter().enumerate() {
        let (start, end, prompt) = samples.span(i);
        let base = row * width;
        let len = end - start;
        out.input_ids[base..base + len].copy_from_slice(&samples.tokens[start..end]);
        out.attention_mask[base..base + len].fill(true);
        out.loss_mask[base + prompt..base + len].fill(true);
        out.token_advantages[base + prompt..base + len].fill(samples.advantages[i] as f32);
    }
    Ok(out)
}

/// Concatenated micro-batch without padding (flash-attn varlen layout).
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub input_ids: Vec<i64>,
    /// Position within its own sample: restarts at 0 for every sample.
    pub position_ids: Vec<i64>,
    /// B + 1 entries: sample b is `cu_seqlens[b]..cu_seqlens[b + 1]` of the packed arrays.
    pub cu_seqlens: Vec<i64>,
    pub loss_mask: Vec<bool>,
    pub token_advantages: Vec<f32>,
}

/// Rows `indices` of `samples` concatenated in that order; same errors as [`pad_batch`].
pub fn pack_batch(samples: Samples<'_>, indices: &[i64]) -> Result<Packed> {
    samples.validate()?;
    let rows = checked_indices(indices, samples.len())?;
    let total: usize = rows.iter().map(|&i| samples.span(i)).map(|(s, e, _)| e - s).sum();
    let mut out = Packed {
        input_ids: Vec::with_capacity(total),
        position_ids: Vec::with_capacity(total),
        cu_seqlens: Vec::with_capacity(rows.len() + 1),
        loss_mask: Vec::with_capacity(total),
        token_advantages: Vec::with_capacity(total),
    };
    out.cu_seqlens.push(0);
    for &i in &rows {
        let (start, end, prompt) = samples.span(i);
        let len = end - start;
        let adv = samples.advantages[i] as f32;
        out.input_ids.extend_from_slice(&samples.tokens[start..end]);
        out.position_ids.extend(0..len as i64);
        out.loss_mask.extend((0..len).map(|t| t >= prompt));
        out.token_advantages.extend((0..len).map(|t| if t >= prompt { adv } else { 0.0 }));
        out.cu_seqlens.push(out.input_ids.len() as i64);
    }
    Ok(out)
}

fn checked_indices(indices: &[i64], n: usize) -> Result<Vec<usize>> {
    indices
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            if i < 0 || i as u64 >= n as u64 {
                Err(arg("indices", format!("index {i} at position {k} is outside 0..{n}")))
            } else {
                Ok(i as usize)
            }
        })
        .collect()
}

fn arg(name: &'static str, msg: String) -> KernelError {
    KernelError::InvalidArgument { name, msg }
}

fn shape(what: &'static str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(KernelError::ShapeMismatch { what, expected, got });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Three samples: [1 2 | 3], [4 | 5 6 7], [8 9] (prompt | response); the last has no response.
    const TOKENS: [i64; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    const OFFSETS: [i64; 4] = [0, 3, 7, 9];
    const PROMPTS: [i64; 3] = [2, 1, 2];
    const ADV: [f64; 3] = [0.5, -1.0, 2.0];

    fn samples() -> Samples<'static> {
        Samples { tokens: &TOKENS, offsets: &OFFSETS, prompt_lens: &PROMPTS, advantages: &ADV }
    }

    #[test]
    fn pads_right_and_masks_response_tokens() {
        let p = pad_batch(samples(), &[0, 1], -1).unwrap();
        assert_eq!((p.batch, p.width), (2, 4));
        assert_eq!(p.input_ids, vec![1, 2, 3, -1, 4, 5, 6, 7]);
        assert_eq!(p.attention_mask, vec![true, true, true, false, true, true, true, true]);
        assert_eq!(p.loss_mask, vec![false, false, true, false, false, true, true, true]);
        assert_eq!(p.token_advantages, vec![0.0, 0.0, 0.5, 0.0, 0.0, -1.0, -1.0, -1.0]);
    }

    #[test]
    fn packs_without_padding_and_restarts_positions() {
        let p = pack_batch(samples(), &[2, 0]).unwrap();
        assert_eq!(p.input_ids, vec![8, 9, 1, 2, 3]);
        assert_eq!(p.position_ids, vec![0, 1, 0, 1, 2]);
        assert_eq!(p.cu_seqlens, vec![0, 2, 5]);
        assert_eq!(p.loss_mask, vec![false, false, false, false, true]);
        assert_eq!(p.token_advantages, vec![0.0, 0.0, 0.0, 0.0, 0.5]);
    }

    #[test]
    fn empty_selection_gives_empty_batches() {
        let p = pad_batch(samples(), &[], 0).unwrap();
        assert_eq!((p.batch, p.width, p.input_ids.len()), (0, 0, 0));
        assert_eq!(pack_batch(samples(), &[]).unwrap().cu_seqlens, vec![0]);
    }

    #[test]
    fn rejects_malformed_samples_and_indices() {
        let with = |offsets: &'static [i64], prompt_lens: &'static [i64]| Samples { offsets, prompt_lens, ..samples() };
        let malformed = [
            with(&[], &[]),                // not even [0]
            with(&[1, 3, 7, 9], &PROMPTS), // does not start at 0
            with(&[0, 3, 7, 8], &PROMPTS), // does not end at len(tokens)
            with(&[0, 5, 4, 9], &PROMPTS), // decreasing
            with(&[0, 3, 3, 9], &PROMPTS), // empty sample
            with(&OFFSETS, &[2, 5, 2]),    // prompt longer than its sample
            with(&OFFSETS, &[2, -1, 2]),   // negative prompt
        ];
        for s in malformed {
            assert!(matches!(pad_batch(s, &[0], 0), Err(KernelError::InvalidArgument { .. })), "{s:?}");
            assert!(matches!(pack_batch(s, &[0]), Err(KernelError::InvalidArgument { .. })), "{s:?}");
        }
        let short = with(&[0, 3, 9], &PROMPTS);
        assert!(matches!(pack_batch(short, &[0]), Err(KernelError::ShapeMismatch { what: "prompt_lens", .. })));
        let nan = Samples { advantages: &[0.0, f64::NAN, 0.0], ..samples() };
        assert!(matches!(pack_batch(nan, &[0]), Err(KernelError::InvalidArgument { name: "advantages", .. })));
        for bad in [[3i64], [-1]] {
            assert!(matches!(pack_batch(samples(), &bad), Err(KernelError::InvalidArgument { name: "indices", .. })));
        }
    }

    #[test]
    fn plans_first_fit_decreasing() {
        // Decreasing: 6 (i1), 5 (i3), 4 (i0), 3 (i4), 2 (i2); capacity 10 -> {6, 4} and {5, 3, 2}.
        let bins = plan_microbatches(&[4, 6, 2, 5, 3], 10).unwrap();
        assert_eq!(bins, vec![vec![0, 1], vec![2, 3, 4]]);
        assert_eq!(plan_microbatches(&[], 10).unwrap(), Vec::<Vec<i64>>::new());
        assert_eq!(plan_microbatches(&[0, 0], 1).unwrap(), vec![vec![0, 1]]);
    }

    #[test]
    fn plan_respects_budget_and_covers_every_sample_once() {
        let lengths: Vec<i64> = (0..5000).map(|i| (i * 7919 % 997 + 1) as i64).collect();
        let bins = plan_microbatches(&lengths, 2048).unwrap();
        let mut seen = vec![0; lengths.len()];
        for b in &bins {
            assert!(b.iter().map(|&i| lengths[i as usize]).sum::<i64>() <= 2048);
            b.iter().for_each(|&i| seen[i as usize] += 1);
        }
        assert!(seen.iter().all(|&c| c == 1));
        let total: i64 = lengths.iter().sum();
        assert!((bins.len() as i64) < total / 2048 + 1 + total / 2048 / 10, "FFD should be near-optimal");
    }

    #[test]
    fn plan_rejects_too_long_negative_and_bad_budget() {
        assert_eq!(
            plan_microbatches(&[3, 11], 10),
            Err(KernelError::SampleTooLong { index: 1, len: 11, max_tokens: 10 })
        );
        assert!(matches!(plan_microbatches(&[-1], 10), Err(KernelError::InvalidArgument { name: "lengths", .. })));
        assert!(matches!(plan_microbatches(&[1], 0), Err(KernelError::InvalidArgument { name: "max_tokens", .. })));
    }
}
