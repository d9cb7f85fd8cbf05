//! Landlock rulesets, made with the `landlock` crate (from the Landlock maintainers) in the parent:
//! read/execute the interpreter and system libraries, read and write only the execution's own
//! directory, no TCP (ABI >= 4), no signals or abstract unix sockets across the sandbox boundary
//! (ABI >= 6). Landlock is unprivileged and also applies to root, so it is the file-system and
//! signal fence even where namespaces are unavailable.
//!
//! The ruleset is built in the parent, one per execution, for the ABI the sandbox was told the
//! kernel offers (`KernelFeatures::landlock_abi`, capped at `LANDLOCK_FULL_ABI`): exactly the rights
//! that ABI knows, as a hard requirement, so what `IsolationReport::missing` lists is what the
//! kernel enforces without (a claim above the real kernel's ABI fails the ruleset, never drops a
//! right silently).
//!
//! Kept by hand, and why:
//! - the child's one call, `landlock_restrict_self(fd, 0)`. The crate's `RulesetCreated::
//!   restrict_self` consumes the ruleset (an owned value whose drop closes its fd) and builds a
//!   status value; the child is a `CLONE_VM | CLONE_VFORK` child running in the parent's memory,
//!   where moving or dropping a value the parent owns is not sound. So the parent turns the
//!   crate's ruleset into its fd (`Option<OwnedFd>::from`, the crate's documented way out) and the
//!   child makes the single syscall on it.
//! - `abi_version`, the kernel's ABI number: the crate keeps its kernel query private (it asks
//!   callers not to branch on the running ABI); we need the number to report each layer the kernel
//!   lacks (`probe::landlock_gaps`) and to ask only for rights it has.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};

use crate::probe::LANDLOCK_FULL_ABI;
use crate::sys::open_path;

pub const SYS_RESTRICT_SELF: libc::c_long = 446;
const SYS_CREATE_RULESET: libc::c_long = 444;
const CREATE_RULESET_VERSION: u32 = 1;

/// Device files every program may read and write.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];
/// System paths every program may read (and execute from): shared libraries, the loader cache, and
/// the few /etc files the standard library reads. Not /proc, /sys, /home, /root or the rest of /etc.
pub const SYSTEM_READ_PATHS: &[&str] = &[
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
];

/// The Landlock ABI version the kernel offers; 0 when Landlock is absent or disabled.
pub fn abi_version() -> u32 {
    let v = unsafe { libc::syscall(SYS_CREATE_RULESET, std::ptr::null::<u8>(), 0usize, CREATE_RULESET_VERSION) };
    if v < 0 {
        0
    } else {
        v as u32
    }
}

fn to_io(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Paths opened once per sandbox (O_PATH), then used for every execution's ruleset.
pub struct Fence {
    read: Vec<(OwnedFd, BitFlags<AccessFs>)>,
    abi: ABI,
}

impl Fence {
    /// `read_paths` that do not exist are skipped; system paths and devices are added here. `abi`:
    /// the kernel's Landlock ABI (> 0); rights newer than it are neither handled nor granted.
    pub fn new(read_paths: &[PathBuf], abi: u32) -> io::Result<Self> {
        let abi = ABI::from(abi.min(LANDLOCK_FULL_ABI) as i32);
        let file_rights = AccessFs::ReadFile | AccessFs::Execute;
        // A rule may only grant rights the ruleset handles (the crate refuses the rest).
        let dev_rights = (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev)
            & AccessFs::from_all(abi);
        let mut read = Vec::new();
        let system = SYSTEM_READ_PATHS.iter().map(PathBuf::from);
        for path in system.chain(read_paths.iter().cloned()) {
            let Ok(meta) = std::fs::metadata(&path) else { continue };
            let rights = if meta.is_dir() { file_rights | AccessFs::ReadDir } else { file_rights };
            read.push((open_path(&path, libc::O_PATH)?, rights));
        }
        for dev in DEVICES {
            if let Ok(fd) = open_path(Path::new(dev), libc::O_PATH) {
                read.push((fd, dev_rights));
            }
        }
        Ok(Self { read, abi })
    }

    /// A ruleset for one execution whose only writable directory is `workdir`: its fd, numbered
    /// above the child's stdio (it is used after the child has `dup2`ed onto fds 0..7).
    pub fn ruleset(&self, workdir: &Path) -> io::Result<OwnedFd> {
        let all = AccessFs::from_all(self.abi);
        let mut ruleset =
            Ruleset::default().set_compatibility(CompatLevel::HardRequirement).handle_access(all).map_err(to_io)?;
        if self.abi >= ABI::V4 {
            ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(to_io)?;
        }
        if self.abi >= ABI::V6 {
            ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal).map_err(to_io)?;
        }
        let mut ruleset = ruleset.create().map_err(to_io)?;
        for (fd, rights) in &self.read {
            ruleset = ruleset.add_rule(PathBeneath::new(fd.as_fd(), *rights)).map_err(to_io)?;
        }
        let dir = PathFd::new(workdir).map_err(to_io)?;
        ruleset = ruleset.add_rule(PathBeneath::new(dir, all)).map_err(to_io)?;
        let fd: Option<OwnedFd> = ruleset.into();
        let fd = fd.ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "the kernel made no Landlock ruleset"))?;
        crate::sys::high(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn rulesets_live_above_the_stdio_fds() {
        if abi_version() == 0 {
            return; // no Landlock on this kernel: nothing to check
        }
        let fence = Fence::new(&[], abi_version()).unwrap();
        let dir = std::env::temp_dir();
        // Whatever fds are free, the ruleset must not land on 0..7 (the child dup2s onto them).
        let rulesets: Vec<OwnedFd> = (0..4).map(|_| fence.ruleset(&dir).unwrap()).collect();
        assert!(rulesets.iter().all(|r| r.as_raw_fd() >= 10));
    }

    #[test]
    fn a_ruleset_for_each_older_abi_asks_only_for_what_that_abi_knows() {
        // HardRequirement: a right the ABI lacks would make `ruleset` fail, so each forced ABI
        // (as `Sandbox::with_kernel` passes it) must build on a kernel at least that new.
        let dir = std::env::temp_dir();
        for abi in 1..=abi_version().min(LANDLOCK_FULL_ABI) {
            let fence = Fence::new(&[], abi).unwrap();
            assert_eq!(fence.abi, ABI::from(abi as i32));
            fence.ruleset(&dir).unwrap_or_else(|e| panic!("ABI {abi}: {e}"));
        }
    }
}
