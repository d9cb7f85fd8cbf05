//! The one place where batch work leaves the GIL.
//!
//! `run_detached` releases the GIL, runs the closure, and turns a Rust panic into an
//! `InternalError` instead of letting it abort or surface as a bare `PanicException`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;

use crate::errors::InternalError;

/// Runs `work` without the GIL; a panic inside becomes `atgrpo.errors.InternalError`.
pub fn run_detached<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: FnOnce() -> PyResult<T> + Send,
    T: Send,
{
    py.detach(|| match catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(payload) => Err(InternalError::new_err(panic_message(payload.as_ref()))),
    })
}

/// Same as `run_detached` for work that must keep the GIL (it touches Python objects).
pub fn run_attached<T, F>(work: F) -> PyResult<T>
where
    F: FnOnce() -> PyResult<T>,
{
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(payload) => Err(InternalError::new_err(panic_message(payload.as_ref()))),
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let detail = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    };
    format!("internal error in atgrpo._core (a Rust panic; please report it): {detail}")
}
