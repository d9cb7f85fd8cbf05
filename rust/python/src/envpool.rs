//! `_core.EnvPool`: converts arguments, runs the pool without the GIL, builds columns.
//!
//! Ownership: every returned numpy array and list is freshly allocated and owned by the caller;
//! the pool keeps no reference to it.

use atgrpo_envs::{make_pool, AnyPool, Split, StepColumns, TextColumn};
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::errors::to_py_env;
use crate::guard::{run_attached, run_detached};

/// A numpy column handed to Python (it owns the buffer).
type Column<'py, T> = Bound<'py, numpy::PyArray1<T>>;

#[pyclass(name = "EnvPool", module = "atgrpo._core")]
pub struct PyEnvPool {
    inner: Box<dyn AnyPool>,
}

fn texts<'py>(py: Python<'py>, column: &TextColumn) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, (0..column.len()).map(|i| PyString::new(py, column.get(i))))
}

fn parse_split(split: &str) -> PyResult<Split> {
    Split::parse(split).ok_or_else(|| PyValueError::new_err(format!("split must be 'train' or 'eval', got {split:?}")))
}

/// An action is text (str, or bytes holding UTF-8) or None; text that is not valid Unicode
/// (lone surrogates, bad UTF-8) becomes None, which the task scores as unparseable.
fn action_text<'a>(item: &'a Bound<'_, PyAny>, index: usize) -> PyResult<Option<&'a str>> {
    if let Ok(s) = item.cast::<PyString>() {
        return Ok(s.to_str().ok());
    }
    if let Ok(b) = item.cast::<PyBytes>() {
        return Ok(std::str::from_utf8(b.as_bytes()).ok());
    }
    if item.is_none() {
        return Ok(None);
    }
    Err(PyTypeError::new_err(format!("actions[{index}] must be str, bytes or None, got {}", item.get_type().name()?)))
}

type StepTuple<'py> = (
    Bound<'py, PyList>,
    Bound<'py, numpy::PyArray1<f64>>,
    Bound<'py, numpy::PyArray1<f64>>,
    Bound<'py, numpy::PyArray1<f64>>,
    Bound<'py, numpy::PyArray1<bool>>,
    Bound<'py, numpy::PyArray1<bool>>,
    Bound<'py, numpy::PyArray1<bool>>,
    Bound<'py, numpy::PyArray1<bool>>,
);

#[pymethods]
impl PyEnvPool {
    #[new]
    #[pyo3(signature = (task, num_envs, config_json = "{}"))]
    fn new(task: &str, num_envs: usize, config_json: &str) -> PyResult<Self> {
        let inner = run_attached(|| make_pool(task, num_envs, config_json).map_err(to_py_env))?;
        Ok(Self { inner })
    }

    #[getter]
    fn task(&self) -> &'static str {
        self.inner.task()
    }

    #[getter]
    fn num_envs(&self) -> usize {
        self.inner.num_envs()
    }

    #[getter]
    fn config_json(&self) -> String {
        self.inner.config_json()
    }

    fn reset<'py>(
        &mut self,
        py: Python<'py>,
        env_ids: PyReadonlyArray1<'py, i64>,
        seeds: PyReadonlyArray1<'py, u64>,
        split: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        let split = parse_split(split)?;
        let (ids, seeds) = (env_ids.as_slice()?, seeds.as_slice()?);
        let pool = &mut *self.inner;
        let obs = run_detached(py, || {
            let mut obs = TextColumn::default();
            pool.reset(ids, seeds, split, &mut obs).map_err(to_py_env)?;
            Ok(obs)
        })?;
        texts(py, &obs)
    }

    fn step<'py>(
        &mut self,
        py: Python<'py>,
        env_ids: PyReadonlyArray1<'py, i64>,
        actions: &Bound<'py, PyList>,
    ) -> PyResult<StepTuple<'py>> {
        let ids = env_ids.as_slice()?;
        let items: Vec<Bound<'py, PyAny>> = actions.iter().collect();
        let texts_in = items.iter().enumerate().map(|(i, it)| action_text(it, i)).collect::<PyResult<Vec<_>>>()?;
        let pool = &mut *self.inner;
        let out = run_detached(py, || {
            let mut out = StepColumns::with_capacity(ids.len());
            pool.step(ids, &texts_in, &mut out).map_err(to_py_env)?;
            Ok(out)
        })?;
        Ok((
            texts(py, &out.obs)?,
            out.reward.into_pyarray(py),
            out.reward_team.into_pyarray(py),
            out.reward_local.into_pyarray(py),
            out.done.into_pyarray(py),
            out.success.into_pyarray(py),
            out.truncated.into_pyarray(py),
            out.valid.into_pyarray(py),
        ))
    }

    fn fork(&mut self, py: Python<'_>, src_id: i64, dst_ids: PyReadonlyArray1<'_, i64>) -> PyResult<()> {
        let dsts = dst_ids.as_slice()?;
        let pool = &mut *self.inner;
        run_detached(py, || pool.fork(src_id, dsts).map_err(to_py_env))
    }

    fn render<'py>(&mut self, py: Python<'py>, env_ids: PyReadonlyArray1<'py, i64>) -> PyResult<Bound<'py, PyList>> {
        let ids = env_ids.as_slice()?;
        let pool = &mut *self.inner;
        let obs = run_detached(py, || {
            let mut obs = TextColumn::default();
            pool.render(ids, &mut obs).map_err(to_py_env)?;
            Ok(obs)
        })?;
        texts(py, &obs)
    }

    fn solve<'py>(
        &mut self,
        py: Python<'py>,
        env_ids: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<(Vec<Option<String>>, Column<'py, u32>)> {
        let ids = env_ids.as_slice()?;
        let pool = &mut *self.inner;
        let (plans, lens) = run_detached(py, || pool.solve(ids).map_err(to_py_env))?;
        Ok((plans, lens.into_pyarray(py)))
    }

    fn status<'py>(
        &mut self,
        py: Python<'py>,
        env_ids: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<(Column<'py, u32>, Column<'py, bool>, Column<'py, bool>)> {
        let ids = env_ids.as_slice()?;
        let pool = &mut *self.inner;
        let (steps, done, success) = run_detached(py, || pool.status(ids).map_err(to_py_env))?;
        Ok((steps.into_pyarray(py), done.into_pyarray(py), success.into_pyarray(py)))
    }

    fn snapshot<'py>(&mut self, py: Python<'py>, env_ids: PyReadonlyArray1<'py, i64>) -> PyResult<Bound<'py, PyList>> {
        let ids = env_ids.as_slice()?;
        let pool = &mut *self.inner;
        let blobs = run_detached(py, || pool.snapshot(ids).map_err(to_py_env))?;
        PyList::new(py, blobs.iter().map(|b| PyBytes::new(py, b)))
    }

    fn restore(&mut self, py: Python<'_>, env_ids: PyReadonlyArray1<'_, i64>, blobs: Vec<Vec<u8>>) -> PyResult<()> {
        let ids = env_ids.as_slice()?;
        let slices: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
        let pool = &mut *self.inner;
        run_detached(py, || pool.restore(ids, &slices).map_err(to_py_env))
    }

    fn close(&mut self) {
        self.inner.close();
    }
}

/// Deliberately panics inside the batch guard: lets the tests prove a panic surfaces as
/// `InternalError` and the interpreter survives.
#[pyfunction]
fn _panic_for_test(py: Python<'_>) -> PyResult<()> {
    run_detached(py, || -> PyResult<()> { panic!("test panic requested by _panic_for_test") })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEnvPool>()?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add("TASKS", atgrpo_envs::TASKS.to_vec())?;
    Ok(())
}
