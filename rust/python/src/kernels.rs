//! Kernel bindings: numpy in, numpy out; semantics live in `atgrpo-kernels` and `atgrpo.kernels`.
//!
//! Each function borrows its arrays (read-only, no copy when C-contiguous), releases the GIL for the
//! batch work and hands the result `Vec`s to numpy without copying (numpy owns them afterwards). The
//! inputs must not be mutated from another Python thread during a call. Defaults live in the facade.

use std::borrow::Cow;

use atgrpo_kernels as k;
use numpy::{Element, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::errors::to_py_kernel;
use crate::guard::run_detached;

type Stats<'py> =
    (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<i64>>, usize, usize, usize, usize);

/// A slice of the array; a strided (non-contiguous) one is copied once instead of being refused.
fn slice<'a, T: Element + Clone>(a: &'a PyReadonlyArray1<'_, T>) -> Cow<'a, [T]> {
    match a.as_slice() {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(a.as_array().to_vec()),
    }
}

fn stats_to_py(py: Python<'_>, s: k::GroupStats) -> Stats<'_> {
    (
        PyArray1::from_vec(py, s.mean),
        PyArray1::from_vec(py, s.std),
        PyArray1::from_vec(py, s.size),
        s.num_singleton,
        s.num_constant,
        s.num_empty,
        s.num_nonfinite,
    )
}

fn options(eps: f64, ddof: i64, scale_by_std: bool) -> PyResult<k::AdvantageOptions> {
    let ddof = u32::try_from(ddof).map_err(|_| {
        to_py_kernel(k::KernelError::InvalidArgument { name: "ddof", msg: format!("must be 0 or 1, got {ddof}") })
    })?;
    Ok(k::AdvantageOptions { eps, ddof, scale_by_std })
}

#[pyfunction]
fn group_ids<'py>(
    py: Python<'py>,
    env: PyReadonlyArray1<'py, i64>,
    agent: PyReadonlyArray1<'py, i64>,
    turn: PyReadonlyArray1<'py, i64>,
) -> PyResult<(Bound<'py, PyArray1<i64>>, usize)> {
    let (env, agent, turn) = (slice(&env), slice(&agent), slice(&turn));
    let g = run_detached(py, || k::group_ids(&env, &agent, &turn).map_err(to_py_kernel))?;
    Ok((PyArray1::from_vec(py, g.ids), g.num_groups))
}

#[pyfunction]
fn group_advantages<'py>(
    py: Python<'py>,
    group_ids: PyReadonlyArray1<'py, i64>,
    rewards: PyReadonlyArray1<'py, f64>,
    num_groups: i64,
    eps: f64,
    ddof: i64,
    scale_by_std: bool,
) -> PyResult<(Bound<'py, PyArray1<f64>>, Stats<'py>)> {
    let (ids, rewards, opts) = (slice(&group_ids), slice(&rewards), options(eps, ddof, scale_by_std)?);
    let num_groups = usize::try_from(num_groups).map_err(|_| {
        let msg = format!("must be >= 0, got {num_groups}");
        to_py_kernel(k::KernelError::InvalidArgument { name: "num_groups", msg })
    })?;
    let a = run_detached(py, || k::group_advantages(&ids, &rewards, num_groups, opts).map_err(to_py_kernel))?;
    Ok((PyArray1::from_vec(py, a.advantages), stats_to_py(py, a.stats)))
}

#[pyfunction]
// The Python signature is the kernel's: three key columns, the rewards and the three options, each
// a keyword there; a struct would only move the same eight names into a second definition.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn compute_advantages<'py>(
    py: Python<'py>,
    env: PyReadonlyArray1<'py, i64>,
    agent: PyReadonlyArray1<'py, i64>,
    turn: PyReadonlyArray1<'py, i64>,
    rewards: PyReadonlyArray1<'py, f64>,
    eps: f64,
    ddof: i64,
    scale_by_std: bool,
) -> PyResult<(Bound<'py, PyArray1<i64>>, usize, Bound<'py, PyArray1<f64>>, Stats<'py>)> {
    let (env, agent, turn, rewards) = (slice(&env), slice(&agent), slice(&turn), slice(&rewards));
    let opts = options(eps, ddof, scale_by_std)?;
    let (g, a) = run_detached(py, || k::compute_advantages(&env, &agent, &turn, &rewards, opts).map_err(to_py_kernel))?;
    let ids = PyArray1::from_vec(py, g.ids);
    Ok((ids, g.num_groups, PyArray1::from_vec(py, a.advantages), stats_to_py(py, a.stats)))
}

#[pyfunction]
fn mix_rewards<'py>(
    py: Python<'py>,
    team: PyReadonlyArray1<'py, f64>,
    local: PyReadonlyArray1<'py, f64>,
    alpha: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let (team, local) = (slice(&team), slice(&local));
    let mixed = run_detached(py, || k::mix_rewards(&team, &local, alpha).map_err(to_py_kernel))?;
    Ok(PyArray1::from_vec(py, mixed))
}

#[pyfunction]
fn plan_microbatches<'py>(
    py: Python<'py>,
    lengths: PyReadonlyArray1<'py, i64>,
    max_tokens: i64,
) -> PyResult<Vec<Bound<'py, PyArray1<i64>>>> {
    let lengths = slice(&lengths);
    let bins = run_detached(py, || k::plan_microbatches(&lengths, max_tokens).map_err(to_py_kernel))?;
    Ok(bins.into_iter().map(|b| PyArray1::from_vec(py, b)).collect())
}

#[pyfunction]
#[allow(clippy::type_complexity)]
fn pad_batch<'py>(
    py: Python<'py>,
    tokens: PyReadonlyArray1<'py, i64>,
    offsets: PyReadonlyArray1<'py, i64>,
    prompt_lens: PyReadonlyArray1<'py, i64>,
    advantages: PyReadonlyArray1<'py, f64>,
    indices: PyReadonlyArray1<'py, i64>,
    pad_id: i64,
) -> PyResult<(
    Bound<'py, PyArray2<i64>>,
    Bound<'py, PyArray2<bool>>,
    Bound<'py, PyArray2<bool>>,
    Bound<'py, PyArray2<f32>>,
)> {
    let (tokens, offsets, prompt_lens) = (slice(&tokens), slice(&offsets), slice(&prompt_lens));
    let (advantages, indices) = (slice(&advantages), slice(&indices));
    let p = run_detached(py, || {
        let samples =
            k::Samples { tokens: &tokens, offsets: &offsets, prompt_lens: &prompt_lens, advantages: &advantages };
        k::pad_batch(samples, &indices, pad_id).map_err(to_py_kernel)
    })?;
    let shape = [p.batch, p.width];
    Ok((
        PyArray1::from_vec(py, p.input_ids).reshape(shape)?,
        PyArray1::from_vec(py, p.attention_mask).reshape(shape)?,
        PyArray1::from_vec(py, p.loss_mask).reshape(shape)?,
        PyArray1::from_vec(py, p.token_advantages).reshape(shape)?,
    ))
}

#[pyfunction]
#[allow(clippy::type_complexity)]
fn pack_batch<'py>(
    py: Python<'py>,
    tokens: PyReadonlyArray1<'py, i64>,
    offsets: PyReadonlyArray1<'py, i64>,
    prompt_lens: PyReadonlyArray1<'py, i64>,
    advantages: PyReadonlyArray1<'py, f64>,
    indices: PyReadonlyArray1<'py, i64>,
) -> PyResult<(
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<bool>>,
    Bound<'py, PyArray1<f32>>,
)> {
    let (tokens, offsets, prompt_lens) = (slice(&tokens), slice(&offsets), slice(&prompt_lens));
    let (advantages, indices) = (slice(&advantages), slice(&indices));
    let p = run_detached(py, || {
        let samples =
            k::Samples { tokens: &tokens, offsets: &offsets, prompt_lens: &prompt_lens, advantages: &advantages };
        k::pack_batch(samples, &indices).map_err(to_py_kernel)
    })?;
    Ok((
        PyArray1::from_vec(py, p.input_ids),
        PyArray1::from_vec(py, p.position_ids),
        PyArray1::from_vec(py, p.cu_seqlens),
        PyArray1::from_vec(py, p.loss_mask),
        PyArray1::from_vec(py, p.token_advantages),
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(group_ids, m)?)?;
    m.add_function(wrap_pyfunction!(group_advantages, m)?)?;
    m.add_function(wrap_pyfunction!(compute_advantages, m)?)?;
    m.add_function(wrap_pyfunction!(mix_rewards, m)?)?;
    m.add_function(wrap_pyfunction!(plan_microbatches, m)?)?;
    m.add_function(wrap_pyfunction!(pad_batch, m)?)?;
    m.add_function(wrap_pyfunction!(pack_batch, m)?)?;
    Ok(())
}
