//! What the machine offers (`KernelFeatures`, probed once per sandbox) and what the sandbox got
//! from it (`IsolationReport`, with every missing layer named in `missing`).

use serde::Serialize;

use crate::landlock;

/// What isolation this machine gave the sandbox, for logs and for the user to check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IsolationReport {
    /// "namespaces", "fallback" (no namespaces) or "none" (`unsafe_no_isolation`).
    pub mode: &'static str,
    /// New user, pid and ipc namespaces per execution.
    pub per_execution_namespaces: bool,
    /// Shared empty network namespace and mount namespace (joined per execution).
    pub shared_namespaces: bool,
    /// Everything but the private directory is mounted read-only (mount namespace).
    pub readonly_root: bool,
    /// Landlock ABI version in use (0: none): file access fence, TCP (>= 4), signal scope (>= 6).
    pub landlock_abi: u32,
    pub seccomp: bool,
    /// Whether programs may start child processes: only where their number is bounded, i.e. with
    /// namespaces as a non-root user (RLIMIT_NPROC per execution). As root or without namespaces,
    /// seccomp refuses them (threads still work).
    pub child_processes: bool,
    /// Root without namespaces: the capability bounding set is dropped before exec.
    pub capabilities_dropped: bool,
    pub rlimits: bool,
    /// Function-mode starts fork from a per-worker zygote (an interpreter started ahead, inside the
    /// sandbox) instead of starting two interpreters; false where the zygote failed its self-test.
    pub zygote: bool,
    /// The layers this machine could not give (empty with full isolation, and for "none").
    pub missing: Vec<Missing>,
    /// Why the sandbox runs with less than full isolation, if it does (set whenever `missing` is
    /// not empty).
    pub warning: Option<String>,
    pub python: String,
}

/// An isolation layer the sandbox runs without.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Missing {
    /// No user namespaces (or their self-test failed): no pid/user/network/mount namespaces.
    Namespaces,
    /// No Landlock: files are protected only by permissions (and, with namespaces, the read-only
    /// mount namespace).
    Landlock,
    /// Landlock < 6 without namespaces: signals are fenced by seccomp only.
    LandlockScopes,
    /// No seccomp: sockets and child processes are not blocked.
    Seccomp,
    /// No `mount_setattr`: the root file system is not read-only.
    ReadonlyRoot,
}

/// What the kernel offers, as `Sandbox::new` finds it (`probe`). Tests pass a copy with features
/// taken away to check how a kernel without them is reported; claiming a feature the kernel lacks
/// only makes the self-test fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelFeatures {
    /// Landlock ABI version, 0 when absent or disabled.
    pub landlock_abi: u32,
    /// Whether unprivileged user namespaces may be tried (false: `user.max_user_namespaces` is 0).
    pub user_namespaces: bool,
    pub seccomp: bool,
}

impl KernelFeatures {
    pub fn probe() -> Self {
        let userns_off = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").is_ok_and(|s| s.trim() == "0");
        Self { landlock_abi: landlock::abi_version(), user_namespaces: !userns_off, seccomp: seccomp_available() }
    }
}

fn seccomp_available() -> bool {
    let arch_ok = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));
    arch_ok && unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0
}
