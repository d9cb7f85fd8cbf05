//! `_core.Sandbox` and its value types: converts programs in, runs batches without the GIL,
//! converts verdicts out. All logic lives in `atgrpo-sandbox`; the facade is `atgrpo.sandbox`.
//!
//! Ownership: `run_batch` copies the programs' text before releasing the GIL, so the caller may do
//! anything with its objects meanwhile; every returned result object is new and owned by the caller.
//! Construction also runs without the GIL (it probes the machine and runs a self-test program).

use std::sync::Arc;

use atgrpo_sandbox::{Program, ProgramResult, Sandbox, SandboxConfig, SandboxError, StdioCase, TestResult};
use pyo3::create_exception;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::errors::AtgrpoError;
use crate::guard::{run_attached, run_detached};

create_exception!(
    atgrpo._core,
    SandboxConfigError,
    AtgrpoError,
    "A sandbox config field is unknown, missing or out of range."
);
create_exception!(
    atgrpo._core,
    InvalidProgramError,
    AtgrpoError,
    "A program given to the sandbox is malformed (no tests, too large)."
);
create_exception!(
    atgrpo._core,
    SandboxUnavailableError,
    AtgrpoError,
    "The requested isolation is not available here, or the interpreter fails its self-test in the sandbox."
);
create_exception!(atgrpo._core, SandboxClosedError, AtgrpoError, "The sandbox was closed.");

fn to_py(err: SandboxError) -> PyErr {
    let msg = err.to_string();
    match err {
        SandboxError::InvalidConfig(_) => SandboxConfigError::new_err(msg),
        SandboxError::InvalidProgram { .. } => InvalidProgramError::new_err(msg),
        SandboxError::Unavailable(_) => SandboxUnavailableError::new_err(msg),
        SandboxError::Closed => SandboxClosedError::new_err(msg),
    }
}

/// Text as bytes: `str` is encoded as UTF-8 (lone surrogates refused), `bytes` taken as is.
fn text_bytes(item: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = item.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = item.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!("{what} must be str or bytes, got {}", item.get_type().name()?)))
}

#[pyclass(name = "SandboxProgram", module = "atgrpo._core", frozen)]
pub struct PyProgram {
    inner: Program,
}

#[pymethods]
impl PyProgram {
    /// A stdin/stdout program; `cases` are `(stdin, expected_stdout or None)` pairs.
    #[staticmethod]
    fn stdio(code: &str, cases: &Bound<'_, PyList>) -> PyResult<Self> {
        let cases = cases
            .iter()
            .enumerate()
            .map(|(i, case)| {
                let (stdin, expected): (Bound<'_, PyAny>, Bound<'_, PyAny>) = case
                    .extract()
                    .map_err(|_| PyTypeError::new_err(format!("cases[{i}] must be a (stdin, expected) pair")))?;
                let stdin = text_bytes(&stdin, &format!("cases[{i}] stdin"))?;
                let expected = if expected.is_none() {
                    None
                } else {
                    Some(text_bytes(&expected, &format!("cases[{i}] expected"))?)
                };
                Ok(StdioCase { stdin, expected })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Self { inner: Program::Stdio { code: code.to_string(), cases } })
    }

    /// A function-call program: `setup` runs after `code`, then each test snippet separately.
    #[staticmethod]
    #[pyo3(signature = (code, tests, setup = ""))]
    fn function(code: &str, tests: Vec<String>, setup: &str) -> Self {
        Self { inner: Program::Function { code: code.to_string(), setup: setup.to_string(), tests } }
    }

    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner {
            Program::Stdio { .. } => "stdio",
            Program::Function { .. } => "function",
        }
    }

    #[getter]
    fn num_tests(&self) -> usize {
        self.inner.num_tests()
    }

    fn __repr__(&self) -> String {
        format!("SandboxProgram(kind={:?}, num_tests={})", self.kind(), self.num_tests())
    }
}

#[pyclass(name = "SandboxTestResult", module = "atgrpo._core", frozen, get_all)]
pub struct PyTestResult {
    verdict: &'static str,
    stdout: Py<PyBytes>,
    stderr_tail: String,
    detail: String,
    wall_s: f64,
}

#[pymethods]
impl PyTestResult {
    fn __repr__(&self) -> String {
        format!("SandboxTestResult(verdict={:?}, detail={:?}, wall_s={:.3})", self.verdict, self.detail, self.wall_s)
    }
}

#[pyclass(name = "SandboxResult", module = "atgrpo._core", frozen, get_all)]
pub struct PyProgramResult {
    tests: Vec<Py<PyTestResult>>,
    verdicts: Vec<&'static str>,
    passed: bool,
    starts: u32,
    wall_s: f64,
}

#[pymethods]
impl PyProgramResult {
    fn __repr__(&self) -> String {
        format!("SandboxResult(verdicts={:?}, starts={}, wall_s={:.3})", self.verdicts, self.starts, self.wall_s)
    }
}

fn result_to_py(py: Python<'_>, r: ProgramResult) -> PyResult<PyProgramResult> {
    let passed = r.passed();
    let verdicts = r.tests.iter().map(|t| t.verdict.as_str()).collect();
    let tests = r
        .tests
        .into_iter()
        .map(|t: TestResult| {
            Py::new(
                py,
                PyTestResult {
                    verdict: t.verdict.as_str(),
                    stdout: PyBytes::new(py, &t.stdout).unbind(),
                    stderr_tail: t.stderr_tail,
                    detail: t.detail,
                    wall_s: t.wall_s,
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyProgramResult { tests, verdicts, passed, starts: r.starts, wall_s: r.wall_s })
}

#[pyclass(name = "Sandbox", module = "atgrpo._core", frozen)]
pub struct PySandbox {
    inner: Arc<Sandbox>,
}

#[pymethods]
impl PySandbox {
    #[new]
    #[pyo3(signature = (config_json = "{}"))]
    fn new(py: Python<'_>, config_json: &str) -> PyResult<Self> {
        let cfg = run_attached(|| SandboxConfig::from_json(config_json).map_err(to_py))?;
        let inner = run_detached(py, || Sandbox::new(cfg).map_err(to_py))?;
        Ok(Self { inner: Arc::new(inner) })
    }

    /// What isolation this machine gave the sandbox (JSON of `IsolationReport`).
    #[getter]
    fn isolation_json(&self) -> String {
        serde_json::to_string(self.inner.isolation()).unwrap_or_default()
    }

    #[getter]
    fn config_json(&self) -> String {
        serde_json::to_string(self.inner.config()).unwrap_or_default()
    }

    /// Runs every program, `workers` at a time, without the GIL; results in input order.
    fn run_batch<'py>(&self, py: Python<'py>, programs: &Bound<'py, PyList>) -> PyResult<Vec<PyProgramResult>> {
        let programs = programs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.cast::<PyProgram>()
                    .map(|p| p.get().inner.clone())
                    .map_err(|_| PyTypeError::new_err(format!("programs[{i}] must be a SandboxProgram")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let sandbox = Arc::clone(&self.inner);
        let results = run_detached(py, move || sandbox.run_batch(programs).map_err(to_py))?;
        results.into_iter().map(|r| result_to_py(py, r)).collect()
    }

    /// Stops taking work and waits for running executions (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let sandbox = Arc::clone(&self.inner);
        run_detached(py, move || {
            sandbox.close();
            Ok(())
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SandboxConfigError", py.get_type::<SandboxConfigError>())?;
    m.add("InvalidProgramError", py.get_type::<InvalidProgramError>())?;
    m.add("SandboxUnavailableError", py.get_type::<SandboxUnavailableError>())?;
    m.add("SandboxClosedError", py.get_type::<SandboxClosedError>())?;
    m.add_class::<PySandbox>()?;
    m.add_class::<PyProgram>()?;
    m.add_class::<PyTestResult>()?;
    m.add_class::<PyProgramResult>()?;
    Ok(())
}
