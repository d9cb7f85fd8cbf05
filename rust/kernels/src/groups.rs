//! Dense AT-GRPO group ids from (env, agent, turn) keys.
//!
//! Invariants:
//! - Two samples share a group id exactly when their (env, agent, turn) triples are equal. `env` is the
//!   environment's own index (never divided by K), so the K samples of different envs never share a
//!   group (python/atgrpo/ALGORITHM.md, rule "Per-environment groups"). Trajectory-level grouping is the same
//!   call with agent = turn = 0.
//! - Ids are dense, 0..G-1, numbered in order of first appearance, so the result is deterministic and
//!   independent of hashing.
//! - Keys must be >= 0: they are indices, and a negative one is almost always a sentinel (-1 = "no env")
//!   that leaked into the batch; grouping it silently would make a fake group.
//!
//! The work is one pass over a table allocated once per call, nothing per sample: a direct-indexed
//! table when the packed keys are dense (the usual case: indices from 0), otherwise an open-addressing
//! hash table (linear probing, power-of-two size, load <= 1/4, doubled as groups appear).

use crate::error::{KernelError, Result};

/// Dense group ids, one per sample, and the number of distinct groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    /// `ids[i]` in `0..num_groups`, numbered by first appearance.
    pub ids: Vec<i64>,
    pub num_groups: usize,
}

/// Groups samples by their (env, agent, turn) key; see the module docs for the rules.
///
/// Errors: `ShapeMismatch` if the three arrays differ in length, `InvalidArgument` if a key is negative
/// or there are 2^32 - 1 samples or more.
pub fn group_ids(env: &[i64], agent: &[i64], turn: &[i64]) -> Result<Groups> {
    let n = env.len();
    check_len("agent", agent, n)?;
    check_len("turn", turn, n)?;
    let (max_env, max_agent, max_turn) =
        (column_max("env", env)?, column_max("agent", agent)?, column_max("turn", turn)?);
    // Tables hold `group + 1` in a u32 (0 = empty), which halves their cache footprint.
    if n >= u32::MAX as usize {
        return Err(KernelError::InvalidArgument {
            name: "env",
            msg: format!("{n} samples is more than the supported {}", u32::MAX - 1),
        });
    }
    // Mixed-radix packing `(env * A + agent) * T + turn` is injective and, for realistic indices,
    // dense: its range is the number of possible groups.
    let (a, t) = (max_agent + 1, max_turn + 1);
    let range = u128::from(max_env + 1) * u128::from(a) * u128::from(t);
    let key = |i: usize| (env[i] as u64 * a + agent[i] as u64) * t + turn[i] as u64;
    // Zeroing a direct table of up to 4 slots per sample (plus 16 KiB) is cheaper than hashing.
    if range <= (4 * n + 4096) as u128 {
        Ok(direct_ids(n, key, range as usize))
    } else if range <= 1u128 << 64 {
        Ok(dense_ids(n, key, mix))
    } else {
        let key = |i: usize| (env[i] as u64, agent[i] as u64, turn[i] as u64);
        Ok(dense_ids(n, key, |(e, a, t)| mix(e ^ mix(a ^ mix(t)))))
    }
}

fn check_len(what: &'static str, col: &[i64], expected: usize) -> Result<()> {
    if col.len() != expected {
        return Err(KernelError::ShapeMismatch { what, expected, got: col.len() });
    }
    Ok(())
}

fn column_max(name: &'static str, col: &[i64]) -> Result<u64> {
    let (mut min, mut max) = (0i64, 0i64);
    for &v in col {
        min = min.min(v);
        max = max.max(v);
    }
    if min < 0 {
        let index = col.iter().position(|&v| v < 0).unwrap_or(0);
        return Err(KernelError::InvalidArgument {
            name,
            msg: format!("keys must be >= 0 (they are indices), got {min} at sample {index}"),
        });
    }
    Ok(max as u64)
}

/// A 64-bit finaliser (splitmix64): packed keys are highly structured (consecutive envs), and linear
/// probing degrades badly on clustered hashes, so every input bit must reach the high bits we index by.
#[inline]
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Keys in `0..range` (small: a few entries per sample) index a plain table: one load per sample and
/// no branch on "new or seen", whose outcome is random (one in K samples opens a group).
fn direct_ids(n: usize, key: impl Fn(usize) -> u64, range: usize) -> Groups {
    let mut table = vec![0u32; range];
    let mut next = 0u32;
    let ids = (0..n)
        .map(|i| {
            let slot = &mut table[key(i) as usize];
            let is_new = u32::from(*slot == 0);
            next += is_new;
            *slot = if is_new == 1 { next } else { *slot };
            i64::from(*slot) - 1
        })
        .collect();
    Groups { ids, num_groups: next as usize }
}

fn dense_ids<K: Copy + Eq>(n: usize, key: impl Fn(usize) -> K, hash: impl Fn(K) -> u64) -> Groups {
    // Load <= 1/4: at 1/2, linear probing's clusters made lookups 2x slower (each extra probe is a
    // dependent load of the key). n slots fit groups of K = 4; more groups double the table.
    let mut slots = vec![0u32; n.next_power_of_two().max(16)];
    let mut keys: Vec<K> = Vec::new();
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let k = key(i);
        let id = match probe(&slots, &keys, k, hash(k)) {
            Ok(id) => id,
            Err(s) => {
                keys.push(k);
                slots[s] = keys.len() as u32;
                if 4 * keys.len() > slots.len() {
                    slots = rebuild(2 * slots.len(), &keys, &hash);
                }
                keys.len() - 1
            }
        };
        ids.push(id as i64);
    }
    Groups { ids, num_groups: keys.len() }
}

/// Slots hold `group + 1` (0 = empty). `Ok(group)` if `k` is present, else `Err(empty slot)`.
#[inline]
fn probe<K: Copy + Eq>(slots: &[u32], keys: &[K], k: K, h: u64) -> std::result::Result<usize, usize> {
    let mask = slots.len() - 1;
    let mut s = (h >> (64 - slots.len().trailing_zeros())) as usize;
    loop {
        match slots[s] {
            0 => return Err(s),
            g if keys[g as usize - 1] == k => return Ok(g as usize - 1),
            _ => s = (s + 1) & mask,
        }
    }
}

fn rebuild<K: Copy + Eq>(capacity: usize, keys: &[K], hash: &impl Fn(K) -> u64) -> Vec<u32> {
    let mut slots = vec![0u32; capacity];
    for (g, &k) in keys.iter().enumerate() {
        if let Err(s) = probe(&slots, &keys[..g], k, hash(k)) {
            slots[s] = g as u32 + 1;
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_groups_by_first_appearance() {
        let g = group_ids(&[3, 3, 1, 3, 1], &[0, 1, 0, 0, 0], &[0, 0, 0, 0, 0]).unwrap();
        assert_eq!(g.ids, vec![0, 1, 2, 0, 2]);
        assert_eq!(g.num_groups, 3);
    }

    #[test]
    fn k_samples_of_different_envs_never_share_a_group() {
        // 3 envs x K=4 samples, same agent and turn: three groups of four, not one of twelve.
        let env: Vec<i64> = (0..12).map(|i| i / 4).collect();
        let g = group_ids(&env, &[0; 12], &[0; 12]).unwrap();
        assert_eq!(g.num_groups, 3);
        assert_eq!(g.ids, env);
    }

    #[test]
    fn agent_and_turn_split_groups() {
        let g = group_ids(&[0, 0, 0, 0], &[0, 1, 0, 1], &[0, 0, 1, 1]).unwrap();
        assert_eq!(g.ids, vec![0, 1, 2, 3]);
    }

    #[test]
    fn empty_input_has_no_groups() {
        let g = group_ids(&[], &[], &[]).unwrap();
        assert_eq!(g, Groups { ids: vec![], num_groups: 0 });
    }

    #[test]
    fn huge_keys_take_the_unpacked_path_and_stay_distinct() {
        let big = i64::MAX;
        let g = group_ids(&[big, big, big - 1, big], &[big, big, big, 0], &[1, 1, 1, 1]).unwrap();
        assert_eq!(g.ids, vec![0, 0, 1, 2]);
    }

    #[test]
    fn packing_that_fills_all_64_bits_stays_injective() {
        // The key range is exactly 2^64: the hashed packed path at its limit.
        let m = u32::MAX as i64;
        let g = group_ids(&[0, 0, 0, 0], &[m, m, 0, m], &[m, 0, m, m]).unwrap();
        assert_eq!(g.ids, vec![0, 1, 2, 0]);
    }

    fn naive(env: &[i64], agent: &[i64], turn: &[i64]) -> Groups {
        let mut seen = std::collections::HashMap::new();
        let ids = (0..env.len())
            .map(|i| {
                let next = seen.len() as i64;
                *seen.entry((env[i], agent[i], turn[i])).or_insert(next)
            })
            .collect();
        Groups { ids, num_groups: seen.len() }
    }

    #[test]
    fn every_path_matches_a_naive_reference() {
        let n = 20_000;
        let agent: Vec<i64> = (0..n).map(|i| (i % 3) as i64).collect();
        let turn: Vec<i64> = (0..n).map(|i| (i / 5 % 4) as i64).collect();
        // Dense keys (direct table), sparse keys (hashed u64), keys too wide for u64 (hashed triple).
        for scale in [1, 1_000_003, 1 << 50] {
            let env: Vec<i64> = (0..n).map(|i| (i * 7919 % 1013) as i64 * scale).collect();
            assert_eq!(group_ids(&env, &agent, &turn).unwrap(), naive(&env, &agent, &turn), "scale {scale}");
        }
    }

    #[test]
    fn rejects_negative_keys_and_length_mismatch() {
        assert!(matches!(group_ids(&[0, -1], &[0, 0], &[0, 0]), Err(KernelError::InvalidArgument { name: "env", .. })));
        assert!(matches!(
            group_ids(&[0, 1], &[0, 0], &[0, -3]),
            Err(KernelError::InvalidArgument { name: "turn", .. })
        ));
        assert_eq!(
            group_ids(&[0, 1], &[0], &[0, 0]),
            Err(KernelError::ShapeMismatch { what: "agent", expected: 2, got: 1 })
        );
    }
}
