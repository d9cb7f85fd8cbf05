//! Group-normalised advantages (python/atgrpo/ALGORITHM.md, step 4) and reward mixing (step 3).
//!
//! `A_i = (r_i - mean_g) / (std_g + eps)` over the finite rewards of sample i's group g, in f64, or
//! `A_i = r_i - mean_g` without the std division (`scale_by_std` false: Dr. GRPO), with these rules,
//! each one tested:
//! - **Non-finite rewards** (NaN, ±inf) are left out of their group's mean and std, get advantage 0 and
//!   are counted in `GroupStats::num_nonfinite`: one broken reward must not poison its K-1 siblings.
//! - **Singleton groups** (one finite reward) get advantage 0: there is no baseline to compare with, and
//!   `r - mean` is 0 anyway; with ddof = 1 the std would be 0/0.
//! - **Constant groups** (two or more finite rewards, max == min) get exactly 0 (equal rewards
//!   contribute zero advantage, python/atgrpo/ALGORITHM.md step 4), not rounding noise divided by eps.
//! - **Empty groups** (ids in `0..num_groups` that no finite reward uses) have mean and std NaN in the
//!   stats; they own no sample with a non-zero advantage.
//! - `std` uses `ddof` (0: population, 1: sample / unbiased; nothing else).

use crate::error::{KernelError, Result};
use crate::groups::{group_ids, Groups};

/// Tunables of the advantage normalisation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdvantageOptions {
    /// Added to the std before dividing; must be finite and > 0.
    pub eps: f64,
    /// Delta degrees of freedom of the std: 0 or 1.
    pub ddof: u32,
    /// Divide by `std + eps` (GRPO). False: centre only (Dr. GRPO drops the division, which weighs
    /// groups of nearly equal rewards up); the degenerate-group rules hold either way.
    pub scale_by_std: bool,
}

impl Default for AdvantageOptions {
    /// ddof = 1 because verl's and TRL's GRPO use `torch.std`, which is unbiased: matching them keeps
    /// advantages (and so learning rates tuned against them) comparable. With K = 4 the population std
    /// would be sqrt(3/4) of it, i.e. advantages 15% larger.
    fn default() -> Self {
        Self { eps: 1e-6, ddof: 1, scale_by_std: true }
    }
}

/// Per-group statistics over finite rewards, plus counts of the degenerate cases (for metrics).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupStats {
    /// Mean of the group's finite rewards; NaN for an empty group.
    pub mean: Vec<f64>,
    /// Std with the chosen ddof; 0 for singleton and constant groups, NaN for empty ones.
    pub std: Vec<f64>,
    /// Number of finite rewards in the group.
    pub size: Vec<i64>,
    pub num_singleton: usize,
    pub num_constant: usize,
    pub num_empty: usize,
    pub num_nonfinite: usize,
}

/// Per-sample advantages and the statistics they were computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct Advantages {
    pub advantages: Vec<f64>,
    pub stats: GroupStats,
}

/// Advantages for samples whose dense group ids are already known (see module docs for the rules).
///
/// Errors: `ShapeMismatch` if `rewards` and `group_ids` differ in length; `InvalidArgument` for a group
/// id outside `0..num_groups`, a non-finite or non-positive `eps`, or `ddof` other than 0 or 1.
pub fn group_advantages(
    group_ids: &[i64],
    rewards: &[f64],
    num_groups: usize,
    opts: AdvantageOptions,
) -> Result<Advantages> {
    validate(group_ids, rewards, opts)?;
    let g = num_groups;
    let empty = Acc { sum: 0.0, min: f64::INFINITY, max: f64::NEG_INFINITY, size: 0 };
    let mut acc = alloc(g, empty)?;
    let mut stats = GroupStats::default();
    for (i, (&id, &r)) in group_ids.iter().zip(rewards).enumerate() {
        if id < 0 || id as u64 >= g as u64 {
            return Err(KernelError::InvalidArgument {
                name: "group_ids",
                msg: format!("group id {id} at sample {i} is outside 0..{g}"),
            });
        }
        if r.is_finite() {
            let a = &mut acc[id as usize];
            a.sum += r;
            a.size += 1;
            a.min = a.min.min(r);
            a.max = a.max.max(r);
        } else {
            stats.num_nonfinite += 1;
        }
    }
    // Per group [mean, sum of squared deviations], later [mean, std + eps or 0 = "leave at 0"]:
    // paired so that each per-sample pass touches one cache line per sample.
    let mut center: Vec<[f64; 2]> = acc
        .iter()
        .map(|a| match a.size {
            0 => [f64::NAN, 0.0],
            // Exact for constant groups: sum / n may round away from the common value.
            _ if a.min == a.max => [a.min, 0.0],
            n => [a.sum / n as f64, 0.0],
        })
        .collect();
    // Deviations in a second pass rather than a sum of squares: no cancellation for large, close rewards.
    for (&id, &r) in group_ids.iter().zip(rewards) {
        if r.is_finite() {
            let c = &mut center[id as usize];
            c[1] += (r - c[0]) * (r - c[0]);
        }
    }
    let (mut mean, mut std, mut size) = (Vec::with_capacity(g), Vec::with_capacity(g), Vec::with_capacity(g));
    for (a, c) in acc.iter().zip(center.iter_mut()) {
        let s = match a.size {
            0 => {
                stats.num_empty += 1;
                f64::NAN
            }
            1 => {
                stats.num_singleton += 1;
                0.0
            }
            _ if a.min == a.max => {
                stats.num_constant += 1;
                0.0
            }
            n => (c[1] / (n - i64::from(opts.ddof)) as f64).sqrt(),
        };
        mean.push(c[0]);
        std.push(s);
        size.push(a.size);
        // 0 ("leave at 0") for empty, singleton and constant groups (and a std that underflowed to 0);
        // 1 when only centring, so that r - m is exact.
        c[1] = match (s > 0.0, opts.scale_by_std) {
            (false, _) => 0.0,
            (true, true) => s + opts.eps,
            (true, false) => 1.0,
        };
    }
    let advantages = group_ids
        .iter()
        .zip(rewards)
        .map(|(&id, &r)| match center[id as usize] {
            [m, denom] if denom > 0.0 && r.is_finite() => (r - m) / denom,
            _ => 0.0,
        })
        .collect();
    stats.mean = mean;
    stats.std = std;
    stats.size = size;
    Ok(Advantages { advantages, stats })
}

/// Running sums over one group's finite rewards, together so a sample updates one cache line.
#[derive(Debug, Clone, Copy)]
struct Acc {
    sum: f64,
    min: f64,
    max: f64,
    size: i64,
}

/// Group ids from (env, agent, turn) keys, then advantages over those groups, in one call.
///
/// Errors: those of [`group_ids`], `ShapeMismatch` if `rewards` has another length, and those of
/// [`group_advantages`] for the options.
pub fn compute_advantages(
    env: &[i64],
    agent: &[i64],
    turn: &[i64],
    rewards: &[f64],
    opts: AdvantageOptions,
) -> Result<(Groups, Advantages)> {
    if rewards.len() != env.len() {
        return Err(KernelError::ShapeMismatch { what: "rewards", expected: env.len(), got: rewards.len() });
    }
    validate_options(opts)?;
    let groups = group_ids(env, agent, turn)?;
    let adv = group_advantages(&groups.ids, rewards, groups.num_groups, opts)?;
    Ok((groups, adv))
}

/// Mixed reward `alpha * team + local` (python/atgrpo/ALGORITHM.md, step 3; alpha = 1 in the paper).
///
/// Non-finite inputs propagate (the advantage kernel then counts and neutralises them).
/// Errors: `ShapeMismatch` on length mismatch, `InvalidArgument` if `alpha` is not finite.
pub fn mix_rewards(team: &[f64], local: &[f64], alpha: f64) -> Result<Vec<f64>> {
    if local.len() != team.len() {
        return Err(KernelError::ShapeMismatch { what: "local", expected: team.len(), got: local.len() });
    }
    if !alpha.is_finite() {
        return Err(KernelError::InvalidArgument { name: "alpha", msg: format!("must be finite, got {alpha}") });
    }
    Ok(team.iter().zip(local).map(|(&t, &l)| alpha * t + l).collect())
}

fn validate(group_ids: &[i64], rewards: &[f64], opts: AdvantageOptions) -> Result<()> {
    if rewards.len() != group_ids.len() {
        return Err(KernelError::ShapeMismatch { what: "rewards", expected: group_ids.len(), got: rewards.len() });
    }
    validate_options(opts)
}

fn validate_options(opts: AdvantageOptions) -> Result<()> {
    if !(opts.eps.is_finite() && opts.eps > 0.0) {
        return Err(KernelError::InvalidArgument {
            name: "eps",
            msg: format!("must be finite and > 0, got {}", opts.eps),
        });
    }
    if opts.ddof > 1 {
        return Err(KernelError::InvalidArgument { name: "ddof", msg: format!("must be 0 or 1, got {}", opts.ddof) });
    }
    Ok(())
}

/// `vec![value; len]` that reports an absurd `num_groups` as an error instead of aborting on OOM.
fn alloc<T: Clone>(len: usize, value: T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| KernelError::InvalidArgument {
        name: "num_groups",
        msg: format!("cannot allocate statistics for {len} groups"),
    })?;
    v.resize(len, value);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: AdvantageOptions = AdvantageOptions { eps: 1e-6, ddof: 1, scale_by_std: true };
    const CENTRE: AdvantageOptions = AdvantageOptions { scale_by_std: false, ..OPTS };

    fn adv(ids: &[i64], r: &[f64], g: usize, opts: AdvantageOptions) -> Advantages {
        group_advantages(ids, r, g, opts).unwrap()
    }

    #[test]
    fn normalises_each_group_with_sample_std() {
        let a = adv(&[0, 0, 0, 0, 1, 1], &[1.0, 2.0, 3.0, 4.0, 10.0, 20.0], 2, OPTS);
        let std0 = (5.0f64 / 3.0).sqrt(); // deviations 1.5, .5, .5, 1.5 -> 5 / (4 - 1)
        let want0 = [-1.5, -0.5, 0.5, 1.5].map(|d| d / (std0 + 1e-6));
        for (got, want) in a.advantages[..4].iter().zip(want0) {
            assert!((got - want).abs() < 1e-12);
        }
        let std1 = 50f64.sqrt();
        assert!((a.advantages[4] + 5.0 / (std1 + 1e-6)).abs() < 1e-12);
        assert_eq!(a.stats.mean, vec![2.5, 15.0]);
        assert_eq!(a.stats.size, vec![4, 2]);
    }

    #[test]
    fn without_std_scaling_advantages_are_centred_rewards() {
        let a = adv(&[0, 0, 0, 0, 1, 1, 2], &[1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 9.0], 3, CENTRE);
        assert_eq!(a.advantages, vec![-1.5, -0.5, 0.5, 1.5, 0.0, 0.0, 0.0]);
        let scaled = adv(&[0, 0, 0, 0, 1, 1, 2], &[1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 9.0], 3, OPTS);
        assert_eq!(a.stats, scaled.stats); // the same groups, only the division differs
    }

    #[test]
    fn ddof_zero_uses_population_std() {
        let a = adv(&[0, 0], &[0.0, 2.0], 1, AdvantageOptions { eps: 1e-6, ddof: 0, scale_by_std: true });
        assert_eq!(a.stats.std, vec![1.0]);
        assert!((a.advantages[0] + 1.0 / (1.0 + 1e-6)).abs() < 1e-15);
    }

    #[test]
    fn singleton_and_constant_groups_get_exactly_zero() {
        let a = adv(&[0, 1, 1, 1, 2, 2], &[5.0, 0.1, 0.1, 0.1, 1.0, 3.0], 3, OPTS);
        assert_eq!(&a.advantages[..4], &[0.0; 4]);
        assert!(a.advantages[4] < 0.0 && a.advantages[5] > 0.0);
        assert_eq!((a.stats.num_singleton, a.stats.num_constant), (1, 1));
        assert_eq!(a.stats.mean[..2], [5.0, 0.1]);
        assert_eq!(a.stats.std[..2], [0.0, 0.0]);
    }

    #[test]
    fn non_finite_rewards_are_excluded_and_counted() {
        let r = [1.0, f64::NAN, 3.0, f64::INFINITY, 7.0, f64::NEG_INFINITY];
        let a = adv(&[0, 0, 0, 1, 1, 2], &r, 3, OPTS);
        let clean = adv(&[0, 0], &[1.0, 3.0], 1, OPTS);
        assert_eq!(a.advantages[0], clean.advantages[0]);
        assert_eq!(a.advantages[2], clean.advantages[1]);
        assert_eq!(a.advantages[1], 0.0);
        assert_eq!(a.advantages[3..], [0.0, 0.0, 0.0]);
        assert_eq!(a.stats.num_nonfinite, 3);
        assert_eq!(a.stats.size, vec![2, 1, 0]);
        assert_eq!((a.stats.num_singleton, a.stats.num_empty), (1, 1));
        assert!(a.stats.mean[2].is_nan() && a.stats.std[2].is_nan());
    }

    #[test]
    fn unused_group_ids_are_empty_groups() {
        let a = adv(&[2, 2], &[0.0, 1.0], 4, OPTS);
        assert_eq!(a.stats.num_empty, 3);
        assert_eq!(a.stats.size, vec![0, 0, 2, 0]);
    }

    #[test]
    fn trajectory_level_grouping_is_agent_and_turn_zero() {
        let env = [0, 0, 1, 1, 0, 1];
        let r = [1.0, 2.0, 3.0, 5.0, 4.0, 4.0];
        let (g, a) = compute_advantages(&env, &[0; 6], &[0; 6], &r, OPTS).unwrap();
        assert_eq!(g.num_groups, 2);
        let by_env = adv(&env, &r, 2, OPTS);
        assert_eq!(a, by_env);
    }

    #[test]
    fn rejects_bad_ids_eps_ddof_and_lengths() {
        let bad = |ids: &[i64], g, opts| group_advantages(ids, &[1.0, 2.0], g, opts).unwrap_err();
        assert!(matches!(bad(&[0, -1], 2, OPTS), KernelError::InvalidArgument { name: "group_ids", .. }));
        assert!(matches!(bad(&[0, 2], 2, OPTS), KernelError::InvalidArgument { name: "group_ids", .. }));
        for eps in [0.0, -1e-6, f64::NAN, f64::INFINITY] {
            let opts = AdvantageOptions { eps, ..OPTS };
            assert!(matches!(bad(&[0, 0], 1, opts), KernelError::InvalidArgument { name: "eps", .. }));
        }
        let opts = AdvantageOptions { ddof: 2, ..OPTS };
        assert!(matches!(bad(&[0, 0], 1, opts), KernelError::InvalidArgument { name: "ddof", .. }));
        assert!(matches!(bad(&[0], 1, OPTS), KernelError::ShapeMismatch { what: "rewards", .. }));
        assert!(matches!(
            compute_advantages(&[0], &[0], &[0], &[], OPTS),
            Err(KernelError::ShapeMismatch { what: "rewards", .. })
        ));
    }

    #[test]
    fn absurd_num_groups_is_an_error_not_an_abort() {
        let err = group_advantages(&[], &[], usize::MAX / 4, OPTS).unwrap_err();
        assert!(matches!(err, KernelError::InvalidArgument { name: "num_groups", .. }));
    }

    #[test]
    fn mixes_team_and_local_rewards() {
        assert_eq!(mix_rewards(&[1.0, 0.0], &[0.5, 2.0], 2.0).unwrap(), vec![2.5, 2.0]);
        assert!(matches!(mix_rewards(&[1.0], &[], 1.0), Err(KernelError::ShapeMismatch { .. })));
        assert!(matches!(mix_rewards(&[1.0], &[1.0], f64::NAN), Err(KernelError::InvalidArgument { .. })));
    }
}
