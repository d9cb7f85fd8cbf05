//! `_core.crc32_many`: crc32s of buffer-protocol objects, read in place and computed without the GIL.
//! The work (threads, splitting, the crc kernel) lives in `atgrpo-checksum`; the caller is
//! `atgrpo.transport.tensors`.
//!
//! Ownership: each object's buffer is held (`PyObject_GetBuffer`) for the whole call, so its memory
//! can be neither freed nor resized meanwhile, and nothing is copied. The caller must not write to
//! it from another thread during the call (the crc32 would then be of torn bytes). Buffers are
//! asked for as plain contiguous bytes (`PyBUF_SIMPLE`), so any item format is read as its raw bytes
//! (`bytes`, `memoryview`, `zmq.Frame`, numpy arrays); the exporter refuses a non-contiguous one
//! with `BufferError`.

use pyo3::ffi;
use pyo3::prelude::*;

use crate::guard::run_detached;

#[pyfunction]
fn crc32_many(py: Python<'_>, buffers: Vec<Bound<'_, PyAny>>, threads: usize) -> PyResult<Vec<u32>> {
    let held = buffers.iter().map(HeldBytes::get).collect::<PyResult<Vec<_>>>()?;
    let slices: Vec<&[u8]> = held.iter().map(HeldBytes::bytes).collect();
    run_detached(py, || Ok(atgrpo_checksum::crc32_many(&slices, threads)))
    // `held` is released here, with the GIL held again, as `PyBuffer_Release` requires.
}

/// A buffer exported as contiguous bytes, released on drop (which must happen with the GIL held).
struct HeldBytes(Box<ffi::Py_buffer>); // boxed: exporters may point into the struct itself

impl HeldBytes {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut view = Box::new(ffi::Py_buffer::new());
        // SAFETY: `obj` is a live object (we hold the GIL) and `view` a writable Py_buffer.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_SIMPLE) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Self(view))
    }

    fn bytes(&self) -> &[u8] {
        let len = usize::try_from(self.0.len).unwrap_or(0);
        if len == 0 || self.0.buf.is_null() {
            return &[];
        }
        // SAFETY: a PyBUF_SIMPLE export is `len` contiguous bytes from `buf`, valid until released,
        // which happens only when `self` (which this slice borrows) is dropped. Writers from other
        // threads are excluded by contract (module docs).
        unsafe { std::slice::from_raw_parts(self.0.buf.cast::<u8>(), len) }
    }
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        // SAFETY: exported by a successful PyObject_GetBuffer, released exactly once, GIL held
        // (instances live only inside `crc32_many`, outside its detached section).
        unsafe { ffi::PyBuffer_Release(&mut *self.0) }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(crc32_many, m)?)?;
    Ok(())
}
