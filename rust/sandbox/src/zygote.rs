//! A zygote per worker: an interpreter started once, inside the sandbox, with the checker's and the
//! program process's code already unmarshalled, that forks the two processes of each function-mode
//! start and the one harness of each stdio start (`zygote.py`; `SandboxConfig::stdio_zygote`). A
//! fork of a warm interpreter costs a fraction of a millisecond; an interpreter start costs several.
//!
//! A stdio program runs inside its harness, as in a spawned one; that child also stacks the
//! start's own Landlock ruleset (writable: `run_dir` only, made per start because `wipe` makes
//! `run_dir` anew) on the zygote's, so it cannot write in `dir` around its directory, as a spawned
//! program cannot write beside its private directory (function programs' processes keep the
//! zygote's ruleset alone and may write in `dir`, which is wiped all the same).
//!
//! The zygote is spawned like any execution (`spawn`: its own user, pid and ipc namespaces, where it
//! is pid 1; Landlock with `dir` as its only writable directory; seccomp; the scrubbed environment;
//! no capabilities), with the filter that allows child processes. Each child installs, before any
//! code of the start runs, the stricter filter of the sandbox's path (no children, signals to
//! itself only) where that path refuses children, and its start's rlimits, fds and directory.
//!
//! Nothing a program does reaches the next one:
//! - memory, module state, environment: each start's processes are forks, copies of a zygote that
//!   never runs untrusted code; nothing flows back into it;
//! - files: every program runs in `run_dir`; after it, the host removes everything under `dir`
//!   (the only place Landlock and the read-only mount let it write) once its processes are dead;
//! - leftover processes: after every start the zygote kills every other process of its pid
//!   namespace (`kill(-1)` as pid 1) and reaps them; without namespaces children are refused, and
//!   each forked process is killed with its session;
//! - SysV IPC and POSIX message queues, which would outlive a program in the worker's ipc
//!   namespace, are refused by seccomp (`seccomp.rs`);
//! - the zygote itself: it is pid 1 of its pid namespace without signal handlers (signals from
//!   inside are dropped), non-dumpable, and holds no fd a child keeps; without namespaces the
//!   children's filter only lets them signal themselves. If it dies anyway, the start gets
//!   `sandbox_error` and the worker starts a new zygote.
//!
//! The host still holds a pidfd of each forked process (the zygote sends it): it polls it for the
//! exit and kills through it, as for spawned processes; the exit status and CPU time come from the
//! zygote, which is the parent and reaps.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use crate::run::{Isolation, Shared};
use crate::spawn::{self, Stacks};
use crate::sys::{self, ExitInfo};

/// How long a reply of the zygote may take (a fork, or the reaping of a killed start).
const REPLY_MS: i32 = 20_000;

pub struct Zygote {
    proc: spawn::Child,
    sock: OwnedFd,
    dir: PathBuf,
    pub run_dir: PathBuf,
}

fn socketpair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    sys::cvt(unsafe {
        libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr())
    })?;
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((sys::high(a)?, sys::high(b)?))
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(path)
}

impl Zygote {
    /// Starts the zygote of one worker in `dir` (made here).
    pub fn start(shared: &Shared, stacks: &mut Stacks, dir: PathBuf) -> Result<Self, String> {
        let cfg = &shared.cfg;
        let run_dir = dir.join("p");
        make_dir(&dir).and_then(|_| make_dir(&run_dir)).map_err(|e| format!("zygote directory: {e}"))?;
        let (boot_r, boot_w) = sys::pipe().map_err(|e| e.to_string())?;
        let (host, theirs) = socketpair().map_err(|e| format!("socketpair: {e}"))?;
        let devnull =
            sys::open_path(Path::new("/dev/null"), libc::O_RDWR).and_then(sys::high).map_err(|e| e.to_string())?;
        let namespaced = matches!(shared.isolation, Isolation::Namespaces(_));
        let mut rlimits = vec![(libc::RLIMIT_CORE, 0), (libc::RLIMIT_NOFILE, cfg.max_open_files)];
        if namespaced {
            // One count for the zygote's user namespace: the zygote, the checker and the program.
            rlimits.push((libc::RLIMIT_NPROC, cfg.max_processes + 3));
        }
        let ruleset = match &shared.fence {
            Some(fence) => Some(fence.ruleset(&dir).map_err(|e| format!("landlock ruleset: {e}"))?),
            None => None,
        };
        let env = [
            "PATH=/usr/local/bin:/usr/bin:/bin".to_string(),
            "LANG=C.UTF-8".to_string(),
            "LC_ALL=C.UTF-8".to_string(),
            format!("HOME={}", run_dir.display()),
            format!("TMPDIR={}", run_dir.display()),
        ]
        .map(|s| CString::new(s).unwrap_or_default());
        let cwd = sys::path_cstring(&dir).map_err(|e| e.to_string())?;
        let mut filter = shared.zygote_filter.clone();
        let isolation = spawn::Isolation {
            namespaces: if let Isolation::Namespaces(ns) = &shared.isolation { Some(ns) } else { None },
            landlock: ruleset.as_ref().map(|fd| fd.as_raw_fd()),
            seccomp: filter.as_mut().map(|f| (f.programs.as_mut_slice(), f.slots.as_slice())),
            drop_capabilities: shared.drop_capabilities,
        };
        let d = devnull.as_raw_fd();
        let stdio = [d, d, d, boot_r.as_raw_fd(), theirs.as_raw_fd()];
        let request = spawn::Request {
            exe: &shared.python,
            argv: &shared.argv,
            env: &env,
            cwd: &cwd,
            stdio: &stdio,
            rlimits: &rlimits,
            isolation: Some(isolation),
        };
        let proc = spawn::spawn(request, stacks).map_err(|e| format!("zygote spawn: {e}"))?;
        drop((boot_r, theirs, devnull, ruleset));
        let config = serde_json::json!({
            "run_dir": run_dir.to_string_lossy(),
            "namespaced": namespaced,
            "child_filter": shared.child_filter.as_ref().map(|(bytes, _)| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()).unwrap_or_default(),
            "child_slots": shared.child_filter.as_ref().map(|(_, slots)| slots.clone()).unwrap_or_default(),
        })
        .to_string();
        let mut boot = [shared.zygote_code.as_slice(), &shared.harness_code, &shared.candidate_code].concat();
        boot.extend_from_slice(&(config.len() as u32).to_le_bytes());
        boot.extend_from_slice(config.as_bytes());
        let zygote = Self { proc, sock: host, dir, run_dir };
        sys::write_all(boot_w.as_raw_fd(), &boot).map_err(|e| format!("zygote boot: {e}"))?;
        Ok(zygote)
    }

    fn send(&self, msg: &[u8], fds: &[RawFd]) -> Result<(), String> {
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize;
        let mut control = vec![0u64; space.div_ceil(8).max(1)];
        let mut iov = libc::iovec { iov_base: msg.as_ptr() as *mut libc::c_void, iov_len: msg.len() };
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if !fds.is_empty() {
            hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_controllen = space as _;
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&hdr);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
                std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), fds.len());
            }
        }
        loop {
            let n = unsafe { libc::sendmsg(self.sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(format!("zygote request: {e}"));
            }
        }
    }

    /// One reply: its bytes and the fd it carried, if any.
    fn recv(&self) -> Result<(Vec<u8>, Option<OwnedFd>), String> {
        let (bytes, fds) = self.recv_fds(1)?;
        Ok((bytes, fds.into_iter().next()))
    }

    /// One reply: its bytes and the first `max` fds it carried (any others are closed).
    fn recv_fds(&self, max: usize) -> Result<(Vec<u8>, Vec<OwnedFd>), String> {
        if !sys::poll_readable(self.sock.as_raw_fd(), REPLY_MS) {
            return Err(format!("the zygote did not reply within {} s", REPLY_MS / 1000));
        }
        let mut buf = [0u8; 64];
        let mut control = [0u64; 8];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = control.as_mut_ptr().cast();
        hdr.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = loop {
            let n = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
            if n >= 0 {
                break n as usize;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(format!("zygote reply: {e}"));
            }
        };
        let mut fds = Vec::new();
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>().add(i));
                        let owned = OwnedFd::from_raw_fd(raw);
                        if fds.len() < max {
                            fds.push(owned); // any extra fds are closed here
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&hdr, c);
            }
        }
        if n == 0 {
            return Err("the zygote exited".into());
        }
        Ok((buf[..n].to_vec(), fds))
    }

    /// Forks the program's process (`program` on its fds 0..) and the checker (`checker`) in one
    /// round trip; their pidfds and pids, in that order.
    pub fn fork_pair(
        &self,
        program: &[RawFd],
        checker: &[RawFd],
        rlimits: &[(libc::__rlimit_resource_t, u64)],
    ) -> Result<[(OwnedFd, i32); 2], String> {
        let mut msg = vec![b'B', program.len() as u8, rlimits.len() as u8];
        for &(res, value) in rlimits {
            let res: u32 = res; // the wire field is a u32: fail to compile where the libc type differs
            msg.extend_from_slice(&res.to_le_bytes());
            msg.extend_from_slice(&value.to_le_bytes());
        }
        self.send(&msg, &[program, checker].concat())?;
        match self.recv_fds(2)? {
            (r, fds) if r.len() == 9 && r[0] == b'Q' && fds.len() == 2 => {
                let mut fds = fds.into_iter();
                let pid = |i: usize| i32::from_le_bytes(r[1 + 4 * i..5 + 4 * i].try_into().unwrap());
                Ok([(fds.next().unwrap(), pid(0)), (fds.next().unwrap(), pid(1))])
            }
            (r, _) => Err(format!("unexpected zygote reply {:?}", String::from_utf8_lossy(&r))),
        }
    }

    /// Forks the harness of a stdio start (`stdio`: its fds 0..=4); its pidfd and pid. The program
    /// runs inside that process, as it does in a spawned harness. `fence`: a Landlock ruleset whose
    /// only writable directory is `run_dir` (made for this start: `wipe` makes `run_dir` anew),
    /// which the child adds to the zygote's before any of its code runs.
    pub fn fork_one(
        &self,
        stdio: &[RawFd],
        fence: Option<RawFd>,
        rlimits: &[(libc::__rlimit_resource_t, u64)],
    ) -> Result<(OwnedFd, i32), String> {
        let mut msg = vec![b'S', u8::from(fence.is_some()), rlimits.len() as u8];
        for &(res, value) in rlimits {
            let res: u32 = res;
            msg.extend_from_slice(&res.to_le_bytes());
            msg.extend_from_slice(&value.to_le_bytes());
        }
        self.send(&msg, &[stdio, fence.as_slice()].concat())?;
        match self.recv_fds(1)? {
            (r, fds) if r.len() == 5 && r[0] == b'Q' && fds.len() == 1 => {
                let pid = i32::from_le_bytes(r[1..5].try_into().unwrap());
                Ok((fds.into_iter().next().unwrap(), pid))
            }
            (r, _) => Err(format!("unexpected zygote reply {:?}", String::from_utf8_lossy(&r))),
        }
    }

    /// Reaps a forked process (dead, or killed by the caller): how it ended.
    pub fn wait(&self, pid: i32) -> Option<ExitInfo> {
        let mut msg = vec![b'W'];
        msg.extend_from_slice(&pid.to_le_bytes());
        self.send(&msg, &[]).ok()?;
        let (r, _) = self.recv().ok()?;
        if r.len() != 17 || r[0] != b'X' {
            return None;
        }
        exit_info(&r[1..])
    }

    /// The end of a start: reaps `pids` (killed by the caller), then kills and reaps every other
    /// process but the zygote; how each of `pids` ended.
    pub fn end(&self, pids: &[i32]) -> Result<Vec<Option<ExitInfo>>, String> {
        let mut msg = vec![b'E'];
        pids.iter().for_each(|p| msg.extend_from_slice(&p.to_le_bytes()));
        self.send(&msg, &[])?;
        let (r, _) = self.recv()?;
        if r.len() != 1 + 16 * pids.len() || r[0] != b'e' {
            return Err(format!("unexpected zygote reply {:?}", String::from_utf8_lossy(&r)));
        }
        Ok(r[1..].chunks(16).map(exit_info).collect())
    }

    /// Kills and reaps every process but the zygote (after each start).
    pub fn clean(&self) -> Result<(), String> {
        self.send(b"C", &[])?;
        match self.recv()? {
            (r, _) if r == b"c" => Ok(()),
            (r, _) => Err(format!("unexpected zygote reply {:?}", String::from_utf8_lossy(&r))),
        }
    }

    /// Removes everything a program left under the zygote's directory and makes `run_dir` afresh
    /// (after each program, once its processes are dead).
    pub fn wipe(&self) -> std::io::Result<()> {
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.is_dir() && !path.is_symlink() {
                sys::remove_tree(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
        make_dir(&self.run_dir)
    }
}

/// `code:i32 signal:i32 cpu_us:u64` as the zygote reports a reaped process (code -2: not its child).
fn exit_info(r: &[u8]) -> Option<ExitInfo> {
    let code = i32::from_le_bytes(r[0..4].try_into().unwrap());
    let signal = i32::from_le_bytes(r[4..8].try_into().unwrap());
    let cpu_us = u64::from_le_bytes(r[8..16].try_into().unwrap());
    if code < 0 {
        return None;
    }
    let (code, signal) = if signal > 0 { (None, Some(signal)) } else { (Some(code), None) };
    Some(ExitInfo { code, signal, cpu_s: cpu_us as f64 * 1e-6 })
}

impl Drop for Zygote {
    fn drop(&mut self) {
        sys::pidfd_kill(self.proc.pidfd.as_raw_fd());
        let _ = sys::wait_pidfd(self.proc.pidfd.as_raw_fd(), true);
        let _ = sys::remove_tree(&self.dir);
    }
}
