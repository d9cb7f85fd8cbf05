//! `atgrpo._core`: the only crate that knows about Python.
//!
//! It converts arguments, releases the GIL around batch work (see `guard`), and maps each Rust error
//! variant to its Python exception class (see `errors`). All logic lives in `atgrpo-envs`,
//! `atgrpo-kernels`, `atgrpo-sandbox` and `atgrpo-checksum`; users import the facade `atgrpo`, never
//! this module.

mod checksum;
mod envpool;
mod errors;
mod guard;
mod kernels;
mod sandbox;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    checksum::register(m)?;
    envpool::register(m)?;
    kernels::register(m)?;
    sandbox::register(m)?;
    Ok(())
}
