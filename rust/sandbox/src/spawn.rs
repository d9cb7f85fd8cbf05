//! Starting one interpreter, without ever copying the host process.
//!
//! The host may be a multi-gigabyte actor. `fork()` would copy its page tables (milliseconds per
//! gigabyte, plus copy-on-write faults afterwards), so we do what `posix_spawn` does: `clone` with
//! `CLONE_VM | CLONE_VFORK`. The child borrows the host's memory and stack-less state while the
//! calling thread is suspended, runs a fixed sequence of raw syscalls prepared by the parent (no
//! allocation, no locks, no Rust panics), and `execve`s the interpreter, which gives it a fresh
//! address space; only then does the calling thread resume. Other host threads keep running.
//!
//! With namespaces, two such children are chained: the first joins the sandbox's shared user,
//! mount and network namespaces (`setns` refuses multi-threaded callers, so the host cannot join
//! itself) and clones the second with `CLONE_PARENT` (so the host is its parent and can wait for
//! it), a new user, pid and ipc namespace and `CLONE_PIDFD`; the first then exits. The second is
//! pid 1 of its pid namespace: when it dies, the kernel kills everything it left behind.
//!
//! In the execution child, in order: uid/gid map (uid 1000 inside), default signal handlers,
//! `setsid`, stdio on fds 0-4 (0-6 for a function-mode checker), `chdir` to the private directory, dropped capability bounding set
//! (root without namespaces), rlimits, parent-death signal, `no_new_privs`, Landlock, every other fd
//! closed, seccomp, signal mask cleared, `execve` with a scrubbed environment. A failing step
//! writes `(step, errno)` to a close-on-exec pipe and exits 127; the parent reads the pipe once the
//! child has exec'd or died, and reports the step by name.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::namespaces::SharedNamespaces;
use crate::sys::{self, Stack};

/// The uid and gid a program has inside its user namespace.
pub const INNER_ID: u32 = 1000;
/// Most fds a child is given (the checker of function mode has seven: stdio, control, results,
/// and its two ends of the call channel).
pub const MAX_STDIO: usize = 7;

pub struct Stacks {
    joiner: Stack,
    child: Stack,
}

impl Stacks {
    pub fn new() -> io::Result<Self> {
        Ok(Self { joiner: Stack::new(64 << 10)?, child: Stack::new(128 << 10)? })
    }
}

/// What one execution's child must do; every pointer stays valid until `spawn` returns.
pub struct Request<'a> {
    pub exe: &'a CString,
    pub argv: &'a [CString],
    pub env: &'a [CString],
    pub cwd: &'a CString,
    /// Sources of fds 0, 1, ... in the child, at most `MAX_STDIO` (all numbered >= 10, see `sys::pipe`).
    pub stdio: &'a [RawFd],
    pub rlimits: &'a [(libc::__rlimit_resource_t, u64)],
    /// Isolation steps; `None` for the unisolated benchmark reference.
    pub isolation: Option<Isolation<'a>>,
}

/// The seccomp programs of one execution and their pid slots `(program, instruction, slot)`.
pub type SeccompPlan<'a> = (&'a mut [Vec<crate::seccomp::sock_filter>], &'a [(usize, usize, crate::seccomp::Slot)]);

pub struct Isolation<'a> {
    pub namespaces: Option<&'a SharedNamespaces>,
    pub landlock: Option<RawFd>,
    /// The seccomp programs (this execution's own copy: the child patches its pid slots).
    pub seccomp: Option<SeccompPlan<'a>>,
    pub drop_capabilities: bool,
}

pub struct Child {
    pub pidfd: OwnedFd,
    /// Pid in the host's pid namespace (also its process group after `setsid`).
    pub pid: i32,
}

const STEPS: &[&str] = &[
    "",
    "join the user namespace",
    "join the mount namespace",
    "join the network namespace",
    "clone the execution process",
    "write /proc/self/setgroups",
    "write /proc/self/uid_map",
    "write /proc/self/gid_map",
    "setsid",
    "set up stdio",
    "chdir to the private directory",
    "set an rlimit",
    "set no_new_privs",
    "landlock_restrict_self",
    "install the seccomp filter",
    "execve the interpreter",
    "drop capabilities",
    "set the parent-death signal",
];

/// Everything the children read, laid out before the clone; they write back only the atomics.
struct Plan {
    exe: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdio: [RawFd; MAX_STDIO],
    n_stdio: usize,
    rlimits: *const (libc::__rlimit_resource_t, u64),
    n_rlimits: usize,
    isolated: bool,
    ns_fds: [RawFd; 3],
    namespaced: bool,
    uid_map: CString,
    gid_map: CString,
    landlock: RawFd,
    filters: *mut Vec<crate::seccomp::sock_filter>,
    n_filters: usize,
    slots: *const (usize, usize, crate::seccomp::Slot),
    n_slots: usize,
    drop_capabilities: bool,
    err_fd: RawFd,
    child_stack: *mut libc::c_void,
    child_pid: AtomicI32,
    child_pidfd: AtomicI32,
}

/// Reports a failed step on the error pipe and exits. Child side only.
unsafe fn fail(plan: &Plan, step: i32) -> libc::c_int {
    let errno = *libc::__errno_location();
    let msg = [step.to_le_bytes(), errno.to_le_bytes()];
    libc::write(plan.err_fd, msg.as_ptr().cast(), 8);
    libc::_exit(127)
}

unsafe fn write_proc(path: &CStr, data: &CStr) -> bool {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let b = data.to_bytes();
    let ok = libc::write(fd, b.as_ptr().cast(), b.len()) == b.len() as isize;
    libc::close(fd);
    ok
}

/// First child (namespaced mode): join the shared namespaces, clone the execution child.
extern "C" fn joiner(arg: *mut libc::c_void) -> libc::c_int {
    unsafe {
        let plan = &*(arg as *const Plan);
        let kinds = [libc::CLONE_NEWUSER, libc::CLONE_NEWNS, libc::CLONE_NEWNET];
        for (i, (&fd, kind)) in plan.ns_fds.iter().zip(kinds).enumerate() {
            if libc::setns(fd, kind) != 0 {
                return fail(plan, 1 + i as i32);
            }
        }
        let flags = libc::CLONE_VM
            | libc::CLONE_VFORK
            | libc::CLONE_PARENT
            | libc::CLONE_PIDFD
            | libc::CLONE_NEWUSER
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC;
        let pid = libc::clone(execution, plan.child_stack, flags, arg, plan.child_pidfd.as_ptr());
        if pid < 0 {
            return fail(plan, 4);
        }
        plan.child_pid.store(pid, Ordering::SeqCst);
        libc::_exit(0)
    }
}

/// The execution child: isolate itself, then exec the interpreter.
extern "C" fn execution(arg: *mut libc::c_void) -> libc::c_int {
    unsafe {
        let plan = &*(arg as *const Plan);
        if plan.namespaced {
            if !write_proc(c"/proc/self/setgroups", c"deny") {
                return fail(plan, 5);
            }
            if !write_proc(c"/proc/self/uid_map", &plan.uid_map) {
                return fail(plan, 6);
            }
            if !write_proc(c"/proc/self/gid_map", &plan.gid_map) {
                return fail(plan, 7);
            }
        }
        // Handlers are the host's (copied, not shared); none may run here, and exec would keep
        // the host's ignored signals ignored.
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        if plan.isolated && libc::setsid() < 0 {
            return fail(plan, 8);
        }
        for (target, &src) in plan.stdio[..plan.n_stdio].iter().enumerate() {
            if libc::dup2(src, target as RawFd) < 0 {
                return fail(plan, 9);
            }
        }
        if libc::chdir(plan.cwd) != 0 {
            return fail(plan, 10);
        }
        if plan.drop_capabilities {
            // Root without namespaces: an empty bounding set means the interpreter execs with no
            // capabilities (no raising rlimits, no bypassing file permissions).
            for cap in 0..64 {
                libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
            }
            if libc::prctl(libc::PR_CAPBSET_READ, 0, 0, 0, 0) != 0 {
                return fail(plan, 16);
            }
        }
        for i in 0..plan.n_rlimits {
            let (resource, value) = *plan.rlimits.add(i);
            let hard = if resource == libc::RLIMIT_CPU { value + 1 } else { value };
            let lim = libc::rlimit { rlim_cur: value, rlim_max: hard };
            if libc::setrlimit(resource, &lim) != 0 {
                return fail(plan, 11);
            }
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail(plan, 17);
        }
        if plan.isolated {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return fail(plan, 12);
            }
            if plan.landlock >= 0 && libc::syscall(crate::landlock::SYS_RESTRICT_SELF, plan.landlock, 0u32) != 0 {
                return fail(plan, 13);
            }
        }
        close_other_fds(plan.n_stdio as u32, plan.err_fd);
        if !plan.filters.is_null() {
            let programs = std::slice::from_raw_parts_mut(plan.filters, plan.n_filters);
            let slots = std::slice::from_raw_parts(plan.slots, plan.n_slots);
            crate::seccomp::patch_pid(programs, slots, libc::getpid());
            // seccompiler's installer is a prctl and a seccomp syscall on the borrowed program
            // (no allocation, no locks; its error carries the OS error, errno stays set).
            for program in programs.iter() {
                if seccompiler::apply_filter(program).is_err() {
                    return fail(plan, 14);
                }
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(plan.exe, plan.argv, plan.envp);
        fail(plan, 15)
    }
}

/// Closes every fd from `first` on except the error pipe (close-on-exec).
unsafe fn close_other_fds(first: u32, keep: RawFd) {
    let ranges = [(first, keep as u32 - 1), (keep as u32 + 1, u32::MAX)];
    for (lo, hi) in ranges {
        if lo <= hi && libc::syscall(libc::SYS_close_range, lo, hi, 0u32) != 0 {
            // Kernels before 5.9: close one by one up to a generous bound.
            for fd in lo..hi.min(65536) {
                libc::close(fd as RawFd);
            }
        }
    }
}

fn c_array(items: &[CString]) -> Vec<*const libc::c_char> {
    items.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
}

/// Starts the interpreter as described; `Err` names the step that failed.
pub fn spawn(req: Request<'_>, stacks: &mut Stacks) -> Result<Child, String> {
    if req.stdio.len() > MAX_STDIO {
        return Err(format!("{} fds for the child; at most {MAX_STDIO}", req.stdio.len()));
    }
    let mut stdio = [-1; MAX_STDIO];
    stdio[..req.stdio.len()].copy_from_slice(req.stdio);
    let argv = c_array(req.argv);
    let envp = c_array(req.env);
    let (err_r, err_w) = sys::pipe().map_err(|e| format!("error pipe: {e}"))?;
    let euid = unsafe { libc::geteuid() };
    let egid = unsafe { libc::getegid() };
    let mut plan = Plan {
        exe: req.exe.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: req.cwd.as_ptr(),
        stdio,
        n_stdio: req.stdio.len(),
        rlimits: req.rlimits.as_ptr(),
        n_rlimits: req.rlimits.len(),
        isolated: req.isolation.is_some(),
        ns_fds: [-1; 3],
        namespaced: false,
        uid_map: CString::new(format!("{INNER_ID} {euid} 1")).unwrap(),
        gid_map: CString::new(format!("{INNER_ID} {egid} 1")).unwrap(),
        landlock: -1,
        filters: std::ptr::null_mut(),
        n_filters: 0,
        slots: std::ptr::null(),
        n_slots: 0,
        drop_capabilities: false,
        err_fd: err_w.as_raw_fd(),
        child_stack: stacks.child.top(),
        child_pid: AtomicI32::new(-1),
        child_pidfd: AtomicI32::new(-1),
    };
    if let Some(iso) = req.isolation {
        if let Some(ns) = iso.namespaces {
            plan.namespaced = true;
            plan.ns_fds = [ns.user.as_raw_fd(), ns.mnt.as_raw_fd(), ns.net.as_raw_fd()];
        }
        plan.landlock = iso.landlock.unwrap_or(-1);
        if let Some((programs, slots)) = iso.seccomp {
            plan.filters = programs.as_mut_ptr();
            plan.n_filters = programs.len();
            plan.slots = slots.as_ptr();
            plan.n_slots = slots.len();
        }
        plan.drop_capabilities = iso.drop_capabilities;
    }

    // No host signal handler may run in a child that shares the host's memory: block everything
    // on this thread across the clone (the children inherit the mask and clear it before exec).
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let arg = &plan as *const Plan as *mut libc::c_void;
    let cloned = unsafe {
        if plan.namespaced {
            let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD;
            let joiner_pid = libc::clone(joiner, stacks.joiner.top(), flags, arg);
            if joiner_pid > 0 {
                let mut status = 0;
                libc::waitpid(joiner_pid, &mut status, libc::__WALL);
            }
            joiner_pid
        } else {
            let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD;
            let pid = libc::clone(execution, stacks.child.top(), flags, arg, plan.child_pidfd.as_ptr());
            plan.child_pid.store(pid, Ordering::SeqCst);
            pid
        }
    };
    let clone_error = io::Error::last_os_error();
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if cloned < 0 {
        return Err(format!("clone failed: {clone_error}"));
    }
    drop(err_w);
    let pidfd = plan.child_pidfd.load(Ordering::SeqCst);
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    let mut report = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match sys::read_some(err_r.as_raw_fd(), &mut report[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    if got == 8 {
        if let Some(fd) = &pidfd {
            let _ = sys::wait_pidfd(fd.as_raw_fd(), true);
        }
        let step = i32::from_le_bytes(report[..4].try_into().unwrap());
        let errno = i32::from_le_bytes(report[4..].try_into().unwrap());
        let name = STEPS.get(step as usize).copied().unwrap_or("unknown step");
        return Err(format!("{name} failed: {}", io::Error::from_raw_os_error(errno)));
    }
    match pidfd {
        Some(pidfd) => Ok(Child { pidfd, pid: plan.child_pid.load(Ordering::SeqCst) }),
        None => Err("the execution process was not created".into()),
    }
}
