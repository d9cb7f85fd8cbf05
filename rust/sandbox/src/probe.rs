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
    /// Stdio starts fork their one harness from that zygote (`SandboxConfig::stdio_zygote`, and the
    /// zygote passed its stdio self-test too); false: each stdio start spawns its own interpreter.
    pub stdio_zygote: bool,
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
    /// Landlock < 3: truncating a file is not a Landlock right (permissions and, with namespaces,
    /// the read-only mount still apply).
    LandlockTruncate,
    /// Landlock < 4: no Landlock TCP bind/connect rule (seccomp's `socket` refusal and, with
    /// namespaces, the empty network namespace still apply).
    LandlockTcp,
    /// Landlock < 5: ioctl on the device files a program may open is not fenced by Landlock.
    LandlockIoctlDev,
    /// Landlock < 6: no signal or abstract unix socket scope (seccomp and, with namespaces, the pid
    /// and network namespaces still apply).
    LandlockScopes,
    /// No seccomp: sockets and child processes are not blocked.
    Seccomp,
    /// No `mount_setattr`: the root file system is not read-only.
    ReadonlyRoot,
}

/// The Landlock layers the sandbox asks for, each with the first ABI that gives it, and what a
/// kernel below that ABI leaves in its place (for the warning).
const LANDLOCK_LAYERS: &[(u32, Missing, &str)] = &[
    (3, Missing::LandlockTruncate, "Landlock < 3: truncation is fenced by file permissions only"),
    (4, Missing::LandlockTcp, "Landlock < 4: no Landlock TCP rule (sockets are refused by seccomp)"),
    (5, Missing::LandlockIoctlDev, "Landlock < 5: ioctl on device files is not fenced by Landlock"),
    (6, Missing::LandlockScopes, "Landlock < 6: no signal or abstract-socket scope (seccomp fences signals)"),
];

/// The newest Landlock ABI whose layers the sandbox asks for; a kernel at or above it gives them all.
pub const LANDLOCK_FULL_ABI: u32 = 6;

/// Every Landlock layer a kernel offering `abi` cannot give, each with a line for the warning:
/// `Missing::Landlock` alone when there is no Landlock at all (abi 0), nothing from
/// `LANDLOCK_FULL_ABI` on. Pure, so an older kernel is tested by passing its number.
pub fn landlock_gaps(abi: u32) -> Vec<(Missing, &'static str)> {
    if abi == 0 {
        return vec![(
            Missing::Landlock,
            "no Landlock: files are fenced by permissions (and the read-only mount) only",
        )];
    }
    LANDLOCK_LAYERS.iter().filter(|(since, _, _)| abi < *since).map(|&(_, m, note)| (m, note)).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(abi: u32) -> Vec<Missing> {
        landlock_gaps(abi).into_iter().map(|(m, _)| m).collect()
    }

    #[test]
    fn each_older_landlock_abi_names_every_layer_it_lacks() {
        use Missing::*;
        assert_eq!(layers(0), [Landlock]);
        assert_eq!(layers(1), [LandlockTruncate, LandlockTcp, LandlockIoctlDev, LandlockScopes]);
        assert_eq!(layers(2), [LandlockTruncate, LandlockTcp, LandlockIoctlDev, LandlockScopes]);
        assert_eq!(layers(3), [LandlockTcp, LandlockIoctlDev, LandlockScopes]);
        assert_eq!(layers(4), [LandlockIoctlDev, LandlockScopes]);
        assert_eq!(layers(5), [LandlockScopes]);
        for abi in LANDLOCK_FULL_ABI..12 {
            assert!(layers(abi).is_empty(), "ABI {abi}");
        }
        // Each line names what it is about, for the warning.
        assert!(landlock_gaps(3).iter().any(|(_, note)| note.contains("TCP")));
        assert!(landlock_gaps(5).iter().any(|(_, note)| note.contains("signal")));
    }
}
