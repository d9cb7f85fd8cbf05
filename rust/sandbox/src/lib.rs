//! Runs untrusted Python programs against their tests and returns one verdict per test.
//!
//! ```text
//! Sandbox::new(config)             probe once: namespaces? Landlock ABI? seccomp? self-test
//!   .run_batch(programs)           workers run them concurrently, results in input order
//!      Worker::run(program)        private dir; interpreter starts (restart after a fatal test)
//!         spawn::spawn             clone(CLONE_VM|CLONE_VFORK) -> isolate -> execve python -I -S
//!         harness.py <-> protocol  every test of the start in one checker, results on fd 4
//!         candidate.py             function mode: the program in its own process, called by the
//!                                  checker over a pipe pair, answering in plain data (codec.py)
//!         zygote.rs / zygote.py    isolated: a start's processes (function mode: both; stdio
//!                                  mode: the harness) are forks of the worker's zygote, an
//!                                  interpreter started ahead in the sandbox
//! ```
//!
//! Isolation layers (see `pool::IsolationReport` for what a given machine got): per-execution
//! user, pid and ipc namespaces; a shared empty network namespace and a read-only mount namespace;
//! Landlock (reads: interpreter and system libraries only; writes: the private directory only; no
//! TCP; no signals or abstract sockets across the boundary); seccomp (no sockets, ptrace, io_uring,
//! namespaces, mounts); rlimits (CPU, address space, processes, file size, open files, no core
//! dumps); a scrubbed environment; `-I -S`; kill of the whole pid namespace (or process group).
//! The seccomp filters are compiled by `seccompiler` and the Landlock rulesets made by the
//! `landlock` crate, both in the parent; the vfork child only installs what was prepared (see
//! `seccomp.rs` and `landlock.rs` for the few instructions still written by hand, and why).
//! `tests/filter_readback.rs` reads the filters back out of a running program and checks them
//! against the promised deny list; `tests/kernel_features.rs` checks that a kernel without Landlock,
//! with an older Landlock ABI, or without user namespaces is reported (`IsolationReport::missing`, `warning`), never accepted silently.
//!
//! Trust boundary of the verdicts: stdout is compared in the host; assert-style results come from
//! the harness over a private fd, authenticated by a per-start nonce that is never in argv, the
//! environment or a file. In function mode the program does not run in that interpreter at all:
//! it gets a process of its own (`candidate.py`), with the same isolation, that holds neither the
//! nonce nor the result pipe nor the tests; the checker runs setup and tests with the program's
//! functions replaced by stand-ins (`remote.py`) whose calls return plain data decoded by
//! `codec.py`, compared by the checker's own `==`. Frame walking, `gc`, `ctypes`, monkeypatched
//! builtins or an object whose `__eq__` always says yes can only ever reach the program's own
//! process. What remains (README "Sandbox"): the tests and setup are trusted code; a program can
//! still return the right plain values by any means it has (e.g. a copy of the prompt's helpers it
//! rewrote); stdio programs print what they like, and the host judges it.
//!
//! Linux only (x86_64, aarch64), kernel >= 5.4 (pidfds). Optional, probed once: user namespaces,
//! Landlock (5.13), `mount_setattr` (5.12), seccomp; `IsolationReport` says what was found.

#[doc(hidden)]
pub mod bpf;
mod config;
mod error;
mod landlock;
mod namespaces;
mod pool;
mod probe;
mod proc;
mod program;
mod protocol;
mod run;
mod seccomp;
mod session;
mod spawn;
mod sys;
mod zygote;

pub use config::SandboxConfig;
pub use error::{Result, SandboxError};
pub use pool::Sandbox;
pub use probe::{landlock_gaps, IsolationReport, KernelFeatures, Missing, LANDLOCK_FULL_ABI};
pub use program::{outputs_match, Program, ProgramResult, StdioCase, TestResult, Verdict};
