//! One process of a start, spawned by the host or forked by the worker's zygote, and how it is
//! killed and reaped: a spawned one by the host (its parent), a forked one through its pidfd and
//! then by the zygote (its parent), which answers how it ended once (the answer is kept).

use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::run::Isolation;
use crate::spawn;
use crate::sys::{self, ExitInfo};
use crate::zygote::Zygote;

/// One process of a start: spawned by the host, or forked by the zygote (which reaps it).
pub enum Proc {
    Spawned(spawn::Child),
    Forked { pidfd: OwnedFd, pid: i32, info: Cell<Option<Option<ExitInfo>>> },
}

impl Proc {
    pub fn pidfd(&self) -> RawFd {
        match self {
            Proc::Spawned(c) => c.pidfd.as_raw_fd(),
            Proc::Forked { pidfd, .. } => pidfd.as_raw_fd(),
        }
    }

    /// A forked process whose end the zygote has not reported yet.
    pub fn pending_pid(&self) -> Option<i32> {
        match self {
            Proc::Forked { pid, info, .. } if info.get().is_none() => Some(*pid),
            _ => None,
        }
    }

    pub fn set_ended(&self, ended: Option<ExitInfo>) {
        if let Proc::Forked { info, .. } = self {
            info.set(Some(ended));
        }
    }

    /// How an exited process ended; a spawned one stays a zombie, a forked one is reaped by the
    /// zygote (once: the answer is kept).
    pub fn ended(&self, zygote: Option<&Zygote>) -> Option<ExitInfo> {
        match self {
            Proc::Spawned(c) => sys::wait_pidfd(c.pidfd.as_raw_fd(), false).ok(),
            Proc::Forked { pid, info, .. } => {
                if info.get().is_none() {
                    info.set(Some(zygote.and_then(|z| z.wait(*pid))));
                }
                info.get().flatten()
            }
        }
    }
}

/// Kills what is left of one process (its pid namespace, or its process group without namespaces)
/// and reaps it; how it ended. The leader stays a zombie until its group is killed, so the group
/// id cannot have been reused.
/// A forked process is killed the same way and reaped by the zygote, whose `clean` after the start
/// kills whatever it left.
pub fn reap(proc: &Proc, isolation: &Isolation, zygote: Option<&Zygote>) -> Option<ExitInfo> {
    sys::pidfd_kill(proc.pidfd());
    let child = match proc {
        Proc::Spawned(child) => child,
        Proc::Forked { .. } => return proc.ended(zygote),
    };
    let info = sys::wait_pidfd(child.pidfd.as_raw_fd(), false).ok();
    if matches!(isolation, Isolation::Fallback) {
        unsafe { libc::kill(-child.pid, libc::SIGKILL) };
    }
    let _ = sys::wait_pidfd(child.pidfd.as_raw_fd(), true);
    info
}
