//! One program, end to end: private directory, interpreter starts, the harness protocol, verdicts.
//!
//! A start runs tests `first..` in one interpreter. The host polls four pipes and the process's
//! pidfd; the per-test clock starts when the program has loaded (`L`) and again at each ack. When a
//! test ends the interpreter (wall or CPU limit, output cap, crash, `os._exit`), that test gets its
//! verdict, the whole execution is killed, and the remaining tests get a fresh interpreter, up to
//! `max_starts` starts and `program_timeout_s`; tests left over are `skipped`. A program that fails
//! before it has loaded (syntax error, loop at module level) fails every remaining test at once.
//!
//! Kill: SIGKILL through the pidfd. With namespaces the process is its pid namespace's init, so the
//! kernel kills every process it left (detached grandchildren included) before the wait returns.
//! Without, the program cannot have children (seccomp) and its process group is killed as well,
//! while the leader is still an unreaped zombie (so the group id cannot have been reused).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::SandboxConfig;
use crate::landlock::Fence;
use crate::namespaces::SharedNamespaces;
use crate::program::{outputs_match, Program, ProgramResult, TestResult, Verdict};
use crate::protocol::{self, Mode, Record, RecordReader, NONCE_LEN};
use crate::seccomp::Filter;
use crate::spawn::{self, Request, Stacks};
use crate::sys::{self, ExitInfo};

/// How executions are isolated (decided once per sandbox, see `pool`).
pub enum Isolation {
    Namespaces(SharedNamespaces),
    Fallback,
    /// Benchmark reference: the same spawn and harness, no isolation.
    None,
}

/// Read-only state shared by all workers.
pub struct Shared {
    pub cfg: SandboxConfig,
    pub python: CString,
    pub argv: Vec<CString>,
    pub work_root: PathBuf,
    pub isolation: Isolation,
    pub fence: Option<Fence>,
    pub filter: Option<Filter>,
    pub drop_capabilities: bool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = sys::remove_tree(&self.work_root);
    }
}

pub struct Worker<'a> {
    pub shared: &'a Shared,
    pub stacks: Stacks,
    pub name: String,
    pub counter: u64,
}

enum Stop {
    /// The harness reported every test.
    Done,
    /// A load failure or a kill before `L`: every remaining test already has its verdict.
    Final,
    Timeout,
    OutputLimit,
    Protocol(String),
    Exited,
}

/// Per-test capture: stdout (capped) and the tail of stderr.
struct Capture {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    bytes: usize,
    tail: usize,
}

impl Capture {
    fn new(tail: usize) -> Self {
        Self { stdout: Vec::new(), stderr: Vec::new(), bytes: 0, tail }
    }

    fn push(&mut self, is_err: bool, data: &[u8], cap: usize) {
        self.bytes += data.len();
        if is_err {
            self.stderr.extend_from_slice(data);
            if self.stderr.len() > 2 * self.tail {
                self.stderr.drain(..self.stderr.len() - self.tail);
            }
        } else {
            let room = cap.saturating_sub(self.stdout.len());
            self.stdout.extend_from_slice(&data[..data.len().min(room)]);
        }
    }

    fn take(&mut self, verdict: Verdict, detail: String, wall_s: f64) -> TestResult {
        let start = self.stderr.len().saturating_sub(self.tail);
        let result = TestResult {
            verdict,
            stdout: std::mem::take(&mut self.stdout),
            stderr_tail: String::from_utf8_lossy(&self.stderr[start..]).into_owned(),
            detail,
            wall_s,
        };
        self.stderr.clear();
        self.bytes = 0;
        result
    }
}

fn harness_verdict(mode: Mode, status: u8, stdout: &[u8], expected: Option<&[u8]>) -> (Verdict, Option<&'static str>) {
    match (mode, status) {
        (_, protocol::ST_MEMORY) => (Verdict::MemoryLimit, None),
        (Mode::Function, protocol::ST_OK) => (Verdict::Passed, None),
        (Mode::Function, protocol::ST_ASSERTION) => (Verdict::WrongAnswer, None),
        (Mode::Stdio, protocol::ST_OK) => match expected {
            Some(want) if !outputs_match(stdout, want) => (Verdict::WrongAnswer, Some("output differs from the expected output")),
            _ => (Verdict::Passed, None),
        },
        (_, protocol::ST_ASSERTION | protocol::ST_ERROR) | _ => (Verdict::RuntimeError, None),
    }
}

impl Worker<'_> {
    pub fn run(&mut self, program: &Program) -> ProgramResult {
        let started = Instant::now();
        let cfg = &self.shared.cfg;
        let deadline = started + Duration::from_secs_f64(cfg.program_timeout_s);
        let n = program.num_tests();
        let mut results: Vec<Option<TestResult>> = vec![None; n];
        let mut starts = 0;
        let mut skip_reason = "not run: the program's interpreter starts were used up";
        let workdir = match self.make_workdir() {
            Ok(dir) => dir,
            Err(e) => {
                let r = TestResult::bare(Verdict::SandboxError, format!("private directory: {e}"));
                return ProgramResult { tests: vec![r; n], starts: 0, wall_s: started.elapsed().as_secs_f64() };
            }
        };
        let mut next = 0;
        while next < n && starts < cfg.max_starts {
            if Instant::now() >= deadline {
                skip_reason = "not run: the program's time budget was used up";
                break;
            }
            starts += 1;
            next = self.start(program, next, deadline, &workdir, &mut results);
        }
        if workdir != self.shared.work_root {
            let _ = sys::remove_tree(&workdir);
        }
        let tests = results.into_iter().map(|r| r.unwrap_or_else(|| TestResult::bare(Verdict::Skipped, skip_reason))).collect();
        ProgramResult { tests, starts, wall_s: started.elapsed().as_secs_f64() }
    }

    fn make_workdir(&mut self) -> std::io::Result<PathBuf> {
        if matches!(self.shared.isolation, Isolation::None) {
            return Ok(self.shared.work_root.clone());
        }
        use std::os::unix::fs::DirBuilderExt;
        self.counter += 1;
        let dir = self.shared.work_root.join(format!("{}-{}", self.name, self.counter));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(dir)
    }

    /// One interpreter start from test `first`; returns the index of the first test without a
    /// verdict (`n` when all have one).
    fn start(&mut self, program: &Program, first: usize, deadline: Instant, workdir: &Path, results: &mut [Option<TestResult>]) -> usize {
        let shared = self.shared;
        let cfg = &shared.cfg;
        let n = program.num_tests();
        let fail_all = |results: &mut [Option<TestResult>], msg: String| {
            for r in results[first..].iter_mut() {
                *r = Some(TestResult::bare(Verdict::SandboxError, msg.clone()));
            }
            n
        };
        let (mode, code, setup, items, expected): (Mode, &str, &str, Vec<&[u8]>, Vec<Option<&[u8]>>) = match program {
            Program::Stdio { code, cases } => (
                Mode::Stdio,
                code,
                "",
                cases[first..].iter().map(|c| c.stdin.as_slice()).collect(),
                cases.iter().map(|c| c.expected.as_deref()).collect(),
            ),
            Program::Function { code, setup, tests } => {
                (Mode::Function, code, setup, tests[first..].iter().map(|t| t.as_bytes()).collect(), vec![None; n])
            }
        };
        let nonce: [u8; NONCE_LEN] = sys::random_bytes();
        let control = protocol::control_message(&nonce, mode, first, code, setup, &items);
        let largest_input = items.iter().map(|i| i.len() as u64).max().unwrap_or(0);

        let pipes = (|| Ok::<_, std::io::Error>((sys::pipe()?, sys::pipe()?, sys::pipe()?, sys::pipe()?)))();
        let Ok(((ctl_r, ctl_w), (res_r, res_w), (out_r, out_w), (err_r, err_w))) = pipes else {
            return fail_all(results, "could not create pipes".into());
        };
        let Ok(devnull) = sys::open_path(Path::new("/dev/null"), libc::O_RDONLY).and_then(sys::high) else {
            return fail_all(results, "could not open /dev/null".into());
        };

        let remaining = deadline.saturating_duration_since(Instant::now()).as_secs_f64();
        let cpu_limit = remaining.ceil().max(1.0) as u64;
        let env = [
            "PATH=/usr/local/bin:/usr/bin:/bin".to_string(),
            "LANG=C.UTF-8".to_string(),
            "LC_ALL=C.UTF-8".to_string(),
            format!("HOME={}", workdir.display()),
            format!("TMPDIR={}", workdir.display()),
        ]
        .map(|s| CString::new(s).unwrap_or_default());
        let Ok(cwd) = sys::path_cstring(workdir) else {
            return fail_all(results, "private directory path has a NUL byte".into());
        };
        let namespaced = matches!(shared.isolation, Isolation::Namespaces(_));
        let mut rlimits = vec![
            (libc::RLIMIT_CPU, cpu_limit),
            (libc::RLIMIT_AS, cfg.memory_mb << 20),
            (libc::RLIMIT_FSIZE, (cfg.max_file_mb << 20).max(largest_input + 1)),
            (libc::RLIMIT_NOFILE, cfg.max_open_files),
            (libc::RLIMIT_CORE, 0),
        ];
        if namespaced {
            rlimits.push((libc::RLIMIT_NPROC, cfg.max_processes));
        }
        let ruleset = match &shared.fence {
            Some(fence) if !matches!(shared.isolation, Isolation::None) => match fence.ruleset(workdir) {
                Ok(fd) => Some(fd),
                Err(e) => return fail_all(results, format!("landlock ruleset: {e}")),
            },
            _ => None,
        };
        let mut filter = shared.filter.clone();
        let isolation = match &shared.isolation {
            Isolation::None => None,
            iso => Some(spawn::Isolation {
                namespaces: if let Isolation::Namespaces(ns) = iso { Some(ns) } else { None },
                landlock: ruleset.as_ref().map(|fd| fd.as_raw_fd()),
                seccomp: filter.as_mut().map(|f| (f.prog.as_mut_slice(), f.slots.as_slice())),
                drop_capabilities: shared.drop_capabilities,
            }),
        };
        let no_limits: [(libc::__rlimit_resource_t, u64); 0] = [];
        let request = Request {
            exe: &shared.python,
            argv: &shared.argv,
            env: &env,
            cwd: &cwd,
            stdio: [devnull.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd(), ctl_r.as_raw_fd(), res_w.as_raw_fd()],
            rlimits: if isolation.is_some() { &rlimits } else { &no_limits },
            isolation,
        };
        let spawned = spawn::spawn(request, &mut self.stacks);
        drop((ctl_r, res_w, out_w, err_w, devnull, ruleset));
        let child = match spawned {
            Ok(child) => child,
            Err(e) => return fail_all(results, format!("spawn: {e}")),
        };
        for fd in [&ctl_w, &res_r, &out_r, &err_r] {
            let _ = sys::set_nonblocking(fd.as_raw_fd());
        }

        let io = Io { ctl: ctl_w, res: res_r, out: out_r, err: err_r };
        let mut session = Session {
            cfg,
            mode,
            expected: &expected,
            reader: RecordReader::new(nonce),
            capture: Capture::new(cfg.stderr_tail_bytes),
            pending: control,
            written: 0,
            cur: first,
            loaded: false,
            case_start: Instant::now(),
        };
        let stop = session.pump(&io, child.pidfd.as_raw_fd(), deadline, results);

        // Kill whatever is left and reap. The leader stays a zombie until its group is killed.
        sys::pidfd_kill(child.pidfd.as_raw_fd());
        let info = sys::wait_pidfd(child.pidfd.as_raw_fd(), false).ok();
        if matches!(shared.isolation, Isolation::Fallback) {
            unsafe { libc::kill(-child.pid, libc::SIGKILL) };
        }
        let _ = sys::wait_pidfd(child.pidfd.as_raw_fd(), true);
        session.drain(&io, results);
        session.finish(stop, info, cpu_limit, results)
    }
}

struct Io {
    ctl: OwnedFd,
    res: OwnedFd,
    out: OwnedFd,
    err: OwnedFd,
}

struct Session<'a> {
    cfg: &'a SandboxConfig,
    mode: Mode,
    expected: &'a [Option<&'a [u8]>],
    reader: RecordReader,
    capture: Capture,
    pending: Vec<u8>,
    written: usize,
    cur: usize,
    loaded: bool,
    case_start: Instant,
}

enum Event {
    None,
    Stop(Stop),
}

impl Session<'_> {
    fn pump(&mut self, io: &Io, pidfd: RawFd, deadline: Instant, results: &mut [Option<TestResult>]) -> Stop {
        let timeout = Duration::from_secs_f64(self.cfg.timeout_s);
        let mut test_deadline = Instant::now() + timeout;
        let (mut out_open, mut err_open) = (true, true);
        loop {
            let now = Instant::now();
            let limit = test_deadline.min(deadline);
            if now >= limit {
                return Stop::Timeout;
            }
            let ms = (limit - now).as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            let want_write = self.written < self.pending.len();
            let mut fds = [
                libc::pollfd { fd: pidfd, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: io.res.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: if out_open { io.out.as_raw_fd() } else { -1 }, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: if err_open { io.err.as_raw_fd() } else { -1 }, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: if want_write { io.ctl.as_raw_fd() } else { -1 }, events: libc::POLLOUT, revents: 0 },
            ];
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if r < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Stop::Protocol(format!("poll failed: {}", std::io::Error::last_os_error()));
            }
            if fds[2].revents != 0 && !self.read_output(io.out.as_raw_fd(), false, &mut out_open) {
                return Stop::OutputLimit;
            }
            if fds[3].revents != 0 && !self.read_output(io.err.as_raw_fd(), true, &mut err_open) {
                return Stop::OutputLimit;
            }
            if fds[4].revents != 0 {
                self.write_pending(io.ctl.as_raw_fd());
            }
            if fds[1].revents != 0 {
                match self.read_records(io, results) {
                    Event::Stop(stop) => return stop,
                    Event::None => {}
                }
                // A record (re)starts the clock of the next test.
                if self.case_start > now {
                    test_deadline = self.case_start + timeout;
                }
            }
            if fds[0].revents != 0 {
                return Stop::Exited;
            }
        }
    }

    /// Reads what is there; false when the test went over its output cap.
    fn read_output(&mut self, fd: RawFd, is_err: bool, open: &mut bool) -> bool {
        let mut buf = [0u8; 65536];
        loop {
            match sys::read_some(fd, &mut buf) {
                Ok(0) => {
                    *open = false;
                    return true;
                }
                Ok(k) => {
                    self.capture.push(is_err, &buf[..k], self.cfg.max_output_bytes);
                    if self.capture.bytes > self.cfg.max_output_bytes {
                        return false;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(_) => {
                    *open = false;
                    return true;
                }
            }
        }
    }

    fn write_pending(&mut self, fd: RawFd) {
        while self.written < self.pending.len() {
            match sys::write_some(fd, &self.pending[self.written..]) {
                Ok(k) => self.written += k,
                Err(_) => return, // WouldBlock, or the harness is gone (its exit is seen on the pidfd)
            }
        }
    }

    fn read_records(&mut self, io: &Io, results: &mut [Option<TestResult>]) -> Event {
        let mut buf = [0u8; 8192];
        loop {
            match sys::read_some(io.res.as_raw_fd(), &mut buf) {
                Ok(0) => break,
                Ok(k) => self.reader.push(&buf[..k]),
                Err(_) => break,
            }
        }
        loop {
            match self.reader.next() {
                Ok(None) => return Event::None,
                Err(e) => return Event::Stop(Stop::Protocol(e)),
                Ok(Some(record)) => {
                    if let Some(stop) = self.on_record(record, io, results) {
                        return Event::Stop(stop);
                    }
                }
            }
        }
    }

    fn on_record(&mut self, record: Record, io: &Io, results: &mut [Option<TestResult>]) -> Option<Stop> {
        match record {
            Record::Loaded { index } if index == self.cur && !self.loaded => {
                self.loaded = true;
                self.case_start = Instant::now();
                None
            }
            Record::TestEnd { index, status, detail } if index == self.cur && self.loaded => {
                // The harness flushed before reporting and now waits for the ack: all of this
                // test's output is already in the pipes.
                let (mut o, mut e) = (true, true);
                if !self.read_output(io.out.as_raw_fd(), false, &mut o) || !self.read_output(io.err.as_raw_fd(), true, &mut e) {
                    return Some(Stop::OutputLimit);
                }
                let (verdict, why) = harness_verdict(self.mode, status, &self.capture.stdout, self.expected[index]);
                let wall = self.case_start.elapsed().as_secs_f64();
                let detail = why.map(str::to_string).unwrap_or(detail);
                results[index] = Some(self.capture.take(verdict, detail, wall));
                self.cur += 1;
                self.case_start = Instant::now();
                self.pending.push(b'c');
                self.write_pending(io.ctl.as_raw_fd());
                None
            }
            Record::LoadFailed { status, detail, .. } if !self.loaded => {
                let (mut o, mut e) = (true, true);
                self.read_output(io.out.as_raw_fd(), false, &mut o);
                self.read_output(io.err.as_raw_fd(), true, &mut e);
                let verdict = if status == protocol::ST_MEMORY { Verdict::MemoryLimit } else { Verdict::RuntimeError };
                let detail = format!("the program failed before its tests ran: {detail}");
                self.fail_remaining(verdict, detail, results);
                Some(Stop::Final)
            }
            Record::Done if self.cur == results.len() => Some(Stop::Done),
            other => Some(Stop::Protocol(format!("unexpected result record {other:?} while at test {}", self.cur))),
        }
    }

    fn fail_remaining(&mut self, verdict: Verdict, detail: String, results: &mut [Option<TestResult>]) {
        let wall = self.case_start.elapsed().as_secs_f64();
        let first = self.capture.take(verdict, detail.clone(), wall);
        for r in results[self.cur..].iter_mut() {
            *r = Some(TestResult { stdout: Vec::new(), ..first.clone() });
        }
        results[self.cur] = Some(first);
    }

    /// Output and records that were still in the pipes when the process ended.
    fn drain(&mut self, io: &Io, results: &mut [Option<TestResult>]) {
        if self.cur < results.len() {
            let (mut o, mut e) = (true, true);
            self.read_output(io.out.as_raw_fd(), false, &mut o);
            self.read_output(io.err.as_raw_fd(), true, &mut e);
        }
    }

    /// Gives the interrupted test (if any) its verdict; returns where the next start begins.
    fn finish(mut self, stop: Stop, info: Option<ExitInfo>, cpu_limit: u64, results: &mut [Option<TestResult>]) -> usize {
        let n = results.len();
        if matches!(stop, Stop::Done | Stop::Final) || self.cur >= n {
            return n;
        }
        let stderr_says_memory = String::from_utf8_lossy(&self.capture.stderr).contains("MemoryError");
        let (verdict, detail) = match (&stop, info) {
            (Stop::Timeout, _) => (Verdict::Timeout, format!("wall-clock limit ({} s) exceeded", self.cfg.timeout_s)),
            (Stop::OutputLimit, _) => (Verdict::OutputLimit, format!("more than {} bytes of output", self.cfg.max_output_bytes)),
            (Stop::Protocol(e), _) => (Verdict::SandboxError, e.clone()),
            (_, Some(i)) if i.signal == Some(libc::SIGXCPU) || (i.signal == Some(libc::SIGKILL) && i.cpu_s >= cpu_limit as f64 - 0.05) => {
                (Verdict::Timeout, format!("CPU time limit ({cpu_limit} s) exceeded"))
            }
            (_, _) if stderr_says_memory => (Verdict::MemoryLimit, format!("out of memory (limit {} MiB)", self.cfg.memory_mb)),
            (_, Some(ExitInfo { signal: Some(s), .. })) => (Verdict::RuntimeError, format!("killed by {} ({s})", sys::signal_name(s))),
            (_, Some(ExitInfo { code: Some(c @ (70 | 72)), .. })) if !self.loaded => {
                (Verdict::SandboxError, format!("the harness could not read its input (status {c})"))
            }
            (_, Some(ExitInfo { code: Some(c), .. })) => (Verdict::RuntimeError, format!("the interpreter exited with status {c} before the test finished")),
            _ => (Verdict::SandboxError, "the interpreter vanished".to_string()),
        };
        if !self.loaded {
            // Failing before the tests start would fail every start the same way.
            let detail = format!("the program failed before its tests ran: {detail}");
            self.fail_remaining(verdict, detail, results);
            return n;
        }
        let wall = self.case_start.elapsed().as_secs_f64();
        results[self.cur] = Some(self.capture.take(verdict, detail, wall));
        self.cur + 1
    }
}
