//! Namespaces shared by every execution of one sandbox, made once at construction.
//!
//! A short-lived child (`clone(CLONE_VM | CLONE_VFORK | CLONE_FILES)`: it borrows the host's memory
//! and file table instead of copying them) unshares a user, mount and network namespace, maps the
//! host's uid and gid into it, makes every mount read-only except the sandbox's work root (bind
//! mounted read-write), opens `/proc/self/ns/{user,mnt,net}` into the shared file table and exits.
//! Those three fds keep the namespaces alive; each execution joins them (`setns`, microseconds)
//! instead of making its own, because a fresh network namespace costs about a millisecond and a
//! fresh mount namespace several (its teardown waits for an RCU grace period). The network namespace
//! is empty (loopback down), so sharing it connects nothing; per-execution user, pid and ipc
//! namespaces are made in `spawn`.

use std::ffi::{CStr, CString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::sys::{path_cstring, Stack};

pub struct SharedNamespaces {
    pub user: OwnedFd,
    pub mnt: OwnedFd,
    pub net: OwnedFd,
    /// Whether everything outside the work root is mounted read-only.
    pub readonly_root: bool,
}

const SYS_MOUNT_SETATTR: libc::c_long = 442;
const MOUNT_ATTR_RDONLY: u64 = 1;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Everything the keeper child needs, prepared by the parent; the child writes back into `out`.
struct Plan {
    uid_map: CString,
    gid_map: CString,
    work_root: CString,
    failed_step: AtomicI32,
    errno: AtomicI32,
    fds: [AtomicI32; 3],
    readonly: AtomicI32,
}

const STEP_NAMES: &[&str] = &[
    "",
    "unshare(user, mount, net)",
    "write /proc/self/setgroups",
    "write /proc/self/uid_map",
    "write /proc/self/gid_map",
    "make mounts private",
    "bind the work root",
    "keep the work root writable",
    "open /proc/self/ns",
    "keep /proc writable",
];

unsafe fn write_file(path: &CStr, data: &CStr) -> bool {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let bytes = data.to_bytes();
    let ok = libc::write(fd, bytes.as_ptr().cast(), bytes.len()) == bytes.len() as isize;
    libc::close(fd);
    ok
}

extern "C" fn keeper(arg: *mut libc::c_void) -> libc::c_int {
    // Runs in the cloned child: raw syscalls only, no allocation, no panics.
    unsafe {
        let plan = &*(arg as *const Plan);
        let fail = |step: i32| -> libc::c_int {
            plan.errno.store(*libc::__errno_location(), Ordering::SeqCst);
            plan.failed_step.store(step, Ordering::SeqCst);
            libc::_exit(1)
        };
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET) != 0 {
            return fail(1);
        }
        if !write_file(c"/proc/self/setgroups", c"deny") {
            return fail(2);
        }
        if !write_file(c"/proc/self/uid_map", &plan.uid_map) {
            return fail(3);
        }
        if !write_file(c"/proc/self/gid_map", &plan.gid_map) {
            return fail(4);
        }
        let none = std::ptr::null::<libc::c_char>();
        if libc::mount(none, c"/".as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
            return fail(5);
        }
        let root = plan.work_root.as_ptr();
        if libc::mount(root, root, none, libc::MS_BIND | libc::MS_REC, std::ptr::null()) != 0 {
            return fail(6);
        }
        let ro = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
        let set = libc::syscall(
            SYS_MOUNT_SETATTR,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            libc::AT_RECURSIVE,
            &ro as *const MountAttr,
            32usize,
        );
        if set == 0 {
            let rw = MountAttr { attr_set: 0, attr_clr: MOUNT_ATTR_RDONLY, propagation: 0, userns_fd: 0 };
            if libc::syscall(
                SYS_MOUNT_SETATTR,
                libc::AT_FDCWD,
                root,
                libc::AT_RECURSIVE,
                &rw as *const MountAttr,
                32usize,
            ) != 0
            {
                return fail(7);
            }
            // Each execution writes its own /proc/self/uid_map before Landlock shuts /proc off.
            let proc_rw = libc::syscall(
                SYS_MOUNT_SETATTR,
                libc::AT_FDCWD,
                c"/proc".as_ptr(),
                0,
                &rw as *const MountAttr,
                32usize,
            );
            if proc_rw != 0 {
                return fail(9);
            }
            plan.readonly.store(1, Ordering::SeqCst);
        }
        let paths = [c"/proc/self/ns/user", c"/proc/self/ns/mnt", c"/proc/self/ns/net"];
        for (slot, path) in plan.fds.iter().zip(paths) {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return fail(8);
            }
            slot.store(fd, Ordering::SeqCst);
        }
        libc::_exit(0)
    }
}

/// Makes the shared namespaces, or says why it cannot.
pub fn create(work_root: &Path) -> Result<SharedNamespaces, String> {
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let plan = Plan {
        uid_map: CString::new(format!("{uid} {uid} 1")).unwrap(),
        gid_map: CString::new(format!("{gid} {gid} 1")).unwrap(),
        work_root: path_cstring(work_root).map_err(|e| e.to_string())?,
        failed_step: AtomicI32::new(0),
        errno: AtomicI32::new(0),
        fds: [AtomicI32::new(-1), AtomicI32::new(-1), AtomicI32::new(-1)],
        readonly: AtomicI32::new(0),
    };
    let mut stack = Stack::new(64 << 10).map_err(|e| e.to_string())?;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD;
    let pid = unsafe { libc::clone(keeper, stack.top(), flags, &plan as *const Plan as *mut libc::c_void) };
    if pid < 0 {
        return Err(format!("clone failed: {}", std::io::Error::last_os_error()));
    }
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    // Take ownership of whatever was opened, so that a failure part-way leaks nothing.
    let fds: Vec<Option<OwnedFd>> = plan
        .fds
        .iter()
        .map(|f| f.load(Ordering::SeqCst))
        .map(|fd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }))
        .collect();
    let step = plan.failed_step.load(Ordering::SeqCst);
    if step != 0 {
        let err = std::io::Error::from_raw_os_error(plan.errno.load(Ordering::SeqCst));
        return Err(format!("{} failed: {err}", STEP_NAMES[step as usize]));
    }
    let mut fds = fds.into_iter();
    match (fds.next().flatten(), fds.next().flatten(), fds.next().flatten()) {
        (Some(user), Some(mnt), Some(net)) => {
            Ok(SharedNamespaces { user, mnt, net, readonly_root: plan.readonly.load(Ordering::SeqCst) == 1 })
        }
        _ => Err(format!("namespace keeper exited with status {status:#x}")),
    }
}
