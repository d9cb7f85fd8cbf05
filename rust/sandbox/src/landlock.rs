//! Landlock rulesets (raw syscalls): read/execute the interpreter and system libraries, read and
//! write only the execution's own directory, no TCP (ABI >= 4), no signals or abstract unix sockets
//! across the sandbox boundary (ABI >= 6). Landlock is unprivileged and also applies to root, so it
//! is the file-system and signal fence even where namespaces are unavailable.
//!
//! The ruleset is built in the parent, one per execution; the child only calls `restrict_self`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::sys::open_path;

const SYS_CREATE_RULESET: libc::c_long = 444;
const SYS_ADD_RULE: libc::c_long = 445;
pub const SYS_RESTRICT_SELF: libc::c_long = 446;
const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
const REFER: u64 = 1 << 13;
const TRUNCATE: u64 = 1 << 14;
const IOCTL_DEV: u64 = 1 << 15;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

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

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version the kernel offers; 0 when Landlock is absent or disabled.
pub fn abi_version() -> u32 {
    let v = unsafe { libc::syscall(SYS_CREATE_RULESET, std::ptr::null::<RulesetAttr>(), 0usize, CREATE_RULESET_VERSION) };
    if v < 0 {
        0
    } else {
        v as u32
    }
}

fn handled_fs(abi: u32) -> u64 {
    let mut all = (1u64 << 13) - 1;
    if abi >= 2 {
        all |= REFER;
    }
    if abi >= 3 {
        all |= TRUNCATE;
    }
    if abi >= 5 {
        all |= IOCTL_DEV;
    }
    all
}

/// Paths opened once per sandbox (O_PATH), then used for every execution's ruleset.
pub struct Fence {
    abi: u32,
    read: Vec<(OwnedFd, u64)>,
}

impl Fence {
    /// `read_paths` that do not exist are skipped; system paths and devices are added here.
    pub fn new(abi: u32, read_paths: &[PathBuf]) -> io::Result<Self> {
        let file_rights = READ_FILE | EXECUTE;
        let dev_rights = (READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV) & handled_fs(abi);
        let mut read = Vec::new();
        let system = SYSTEM_READ_PATHS.iter().map(PathBuf::from);
        for path in system.chain(read_paths.iter().cloned()) {
            let Ok(meta) = std::fs::metadata(&path) else { continue };
            let rights = if meta.is_dir() { file_rights | READ_DIR } else { file_rights };
            read.push((open_path(&path, libc::O_PATH)?, rights));
        }
        for dev in DEVICES {
            if let Ok(fd) = open_path(Path::new(dev), libc::O_PATH) {
                read.push((fd, dev_rights));
            }
        }
        Ok(Self { abi, read })
    }

    /// A ruleset for one execution whose only writable directory is `workdir`.
    pub fn ruleset(&self, workdir: &Path) -> io::Result<OwnedFd> {
        let attr = RulesetAttr {
            handled_access_fs: handled_fs(self.abi),
            handled_access_net: if self.abi >= 4 { NET_BIND_TCP | NET_CONNECT_TCP } else { 0 },
            scoped: if self.abi >= 6 { SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL } else { 0 },
        };
        let size = match self.abi {
            0..=3 => 8,
            4..=5 => 16,
            _ => 24,
        };
        let fd = unsafe { libc::syscall(SYS_CREATE_RULESET, &attr as *const RulesetAttr, size as usize, 0u32) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // Used by the child after it has dup2'ed onto fds 0..4, so keep it above them.
        let ruleset = crate::sys::high(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })?;
        for (path, rights) in &self.read {
            add_rule(&ruleset, path.as_raw_fd(), *rights)?;
        }
        let dir = open_path(workdir, libc::O_PATH | libc::O_DIRECTORY)?;
        add_rule(&ruleset, dir.as_raw_fd(), handled_fs(self.abi))?;
        Ok(ruleset)
    }
}

fn add_rule(ruleset: &OwnedFd, parent_fd: RawFd, allowed_access: u64) -> io::Result<()> {
    let attr = PathBeneathAttr { allowed_access, parent_fd };
    let r = unsafe { libc::syscall(SYS_ADD_RULE, ruleset.as_raw_fd(), RULE_PATH_BENEATH, &attr as *const PathBeneathAttr, 0u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rulesets_live_above_the_stdio_fds() {
        let abi = abi_version();
        if abi == 0 {
            return; // no Landlock on this kernel: nothing to check
        }
        let fence = Fence::new(abi, &[]).unwrap();
        let dir = std::env::temp_dir();
        // Whatever fds are free, the ruleset must not land on 0..4 (the child dup2s onto them).
        let rulesets: Vec<OwnedFd> = (0..4).map(|_| fence.ruleset(&dir).unwrap()).collect();
        assert!(rulesets.iter().all(|r| r.as_raw_fd() >= 10));
    }
}
