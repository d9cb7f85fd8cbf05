//! Thin, checked wrappers over the few libc calls the parent side needs.
//!
//! Everything here runs in the host process (never in a cloned child: see `spawn` for that side).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

pub fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub fn cstring(s: impl AsRef<[u8]>) -> io::Result<CString> {
    CString::new(s.as_ref().to_vec()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a path"))
}

pub fn path_cstring(p: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    cstring(p.as_os_str().as_bytes())
}

/// A pipe `(read, write)`, both close-on-exec, both numbered >= 10 so that a child can `dup2` them
/// onto 0..4 without clobbering one another.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((high(r)?, high(w)?))
}

/// The same file at a descriptor >= 10 (close-on-exec): the child `dup2`s onto 0..4, so anything it
/// still needs after that must live above them.
pub fn high(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() >= 10 {
        return Ok(fd);
    }
    let new = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    Ok(())
}

pub fn open_path(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = path_cstring(path)?;
    let fd = cvt(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Random bytes from the kernel (the harness nonce).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    let mut done = 0;
    while done < N {
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), N - done, 0) };
        if n > 0 {
            done += n as usize;
        } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            panic!("getrandom failed: {}", io::Error::last_os_error());
        }
    }
    buf
}

/// Reads what is available without blocking; `Ok(0)` at end of file, `WouldBlock` when empty.
pub fn read_some(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

pub fn write_some(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

pub fn pidfd_kill(pidfd: RawFd) {
    // Errors (already dead) are expected and harmless.
    unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd, libc::SIGKILL, std::ptr::null::<u8>(), 0) };
}

/// How a reaped process ended, with the CPU time it used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cpu_s: f64,
}

/// `waitid(P_PIDFD)`; with `reap = false` the process stays a zombie (its pid and process group
/// cannot be reused while we kill the group).
pub fn wait_pidfd(pidfd: RawFd, reap: bool) -> io::Result<ExitInfo> {
    const P_PIDFD: libc::c_int = 3;
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | if reap { 0 } else { libc::WNOWAIT };
    loop {
        let r = unsafe {
            libc::syscall(libc::SYS_waitid, P_PIDFD, pidfd, &mut info as *mut _, flags, &mut usage as *mut _)
        };
        if r == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let status = unsafe { info.si_status() };
    let (code, signal) = match info.si_code {
        libc::CLD_EXITED => (Some(status), None),
        _ => (None, Some(status)),
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok(ExitInfo { code, signal, cpu_s: tv(usage.ru_utime) + tv(usage.ru_stime) })
}

/// Writes all of `buf` to a blocking fd.
pub fn write_all(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = write_some(fd, buf)?;
        buf = &buf[n..];
    }
    Ok(())
}

/// Whether `fd` becomes readable within `ms` milliseconds (for a pidfd: whether the process exited).
pub fn poll_readable(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms.max(0) as u64);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now()).as_millis() as i32;
        match unsafe { libc::poll(&mut p, 1, left) } {
            r if r > 0 => return p.revents != 0,
            0 => return false,
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
            _ => return false,
        }
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSYS => "SIGSYS",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}

/// Memory for a cloned child's stack: mmap'd, with a guard page below so an overflow faults instead
/// of writing into the host's heap (the child shares the host's address space until it execs).
pub struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

// The stack is only used by a child while the owning thread is suspended in clone(CLONE_VFORK).
unsafe impl Send for Stack {}

impl Stack {
    pub fn new(len: usize) -> io::Result<Self> {
        let page = 4096;
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        cvt(unsafe { libc::mprotect(base, page, libc::PROT_NONE) })?;
        Ok(Self { base, len: len + page })
    }

    /// The top (stacks grow down on every architecture we build for), 16-byte aligned.
    pub fn top(&mut self) -> *mut libc::c_void {
        unsafe { self.base.cast::<u8>().add(self.len - 64) }.cast()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Removes a directory tree a hostile program may have made awkward (mode 000 directories, deep
/// nesting, symlinks pointing out): permissions are restored before descending, links are never
/// followed.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_dir_all(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(entry.path());
                }
            }
        }
    }
    std::fs::remove_dir_all(path)
}
