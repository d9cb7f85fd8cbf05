//! One program, end to end: private directory, interpreter starts, the harness protocol, verdicts.
//!
//! A start runs tests `first..` in one interpreter (stdio mode), or in one checker interpreter plus
//! one for the program itself (function mode; both started here, side by side, with the same
//! isolation, limits and private directory, and killed together). The host polls the pipes and
//! the pidfds (`session`). When a test ends the interpreter (wall or CPU limit, output cap, crash,
//! `os._exit`), that test gets its verdict, the whole execution is killed, and the remaining tests
//! get a fresh interpreter, up to
//! `max_starts` starts and `program_timeout_s`; tests left over are `skipped`. A program that fails
//! before it has loaded (syntax error, loop at module level) fails every remaining test at once.
//!
//! With isolation, function mode forks both processes from the worker's zygote (`zygote.rs`) instead
//! of starting two interpreters, and stdio mode forks its one harness from it (unless
//! `stdio_zygote` is off); the unisolated reference spawns as before.
//!
//! Kill: SIGKILL through the pidfd. With namespaces the process is its pid namespace's init, so the
//! kernel kills every process it left (detached grandchildren included) before the wait returns.
//! Without, the program cannot have children (seccomp) and its process group is killed as well,
//! while the leader is still an unreaped zombie (so the group id cannot have been reused).

use std::cell::Cell;
use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::SandboxConfig;
use crate::landlock::Fence;
use crate::namespaces::SharedNamespaces;
use crate::proc::{reap, Proc};
use crate::program::{Program, ProgramResult, TestResult, Verdict};
use crate::protocol::{self, Mode, RecordReader, NONCE_LEN};
use crate::seccomp::Filter;
use crate::session::{Capture, Io, Session, Stop};
use crate::spawn::{self, Request, Stacks};
use crate::sys::{self, ExitInfo};
use crate::zygote::Zygote;

/// How executions are isolated (decided once per sandbox, see `pool`).
pub enum Isolation {
    Namespaces(SharedNamespaces),
    Fallback,
    /// Benchmark reference: the same spawn and harness, no isolation.
    None,
}

/// A zygote child's extra filter program: its `sock_filter`s as bytes, and its pid slots
/// `(instruction, 0 pid | 1 -pid)`.
pub type ChildFilter = (Vec<u8>, Vec<(usize, u8)>);

/// Read-only state shared by all workers.
pub struct Shared {
    pub cfg: SandboxConfig,
    pub python: CString,
    /// `python -I -S -c BOOT`, for every process of a start.
    pub argv: Vec<CString>,
    /// What `BOOT` reads first (`len:u32` + marshalled code): the harness (checker), and the
    /// program's own process of function mode.
    pub harness_code: Vec<u8>,
    pub candidate_code: Vec<u8>,
    pub work_root: PathBuf,
    pub isolation: Isolation,
    pub fence: Option<Fence>,
    pub filter: Option<Filter>,
    pub drop_capabilities: bool,
    /// The zygote's script (`len:u32` + marshal), its filter (child processes allowed), and the
    /// program that each forked process adds where the path refuses children: its bytes and its
    /// pid slots `(instruction, 0 pid | 1 -pid)`.
    pub zygote_code: Vec<u8>,
    pub zygote_filter: Option<Filter>,
    pub child_filter: Option<ChildFilter>,
    /// Whether function-mode starts fork from a zygote (isolated sandboxes).
    pub use_zygote: bool,
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
    pub zygote: Option<Zygote>,
    /// Whether the zygote reaped everything of the current start already (`Zygote::end`).
    pub zygote_cleaned: bool,
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
        let zygote =
            (matches!(program, Program::Function { .. }) || self.shared.cfg.stdio_zygote) && self.ensure_zygote();
        let made = if zygote {
            Ok(self.zygote.as_ref().map(|z| z.run_dir.clone()).unwrap_or_default())
        } else {
            self.make_workdir()
        };
        let workdir = match made {
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
            next = self.start(program, next, deadline, &workdir, zygote, &mut results);
        }
        if zygote {
            // Its processes are dead (every start ends with `clean`): nothing of it may remain.
            if self.zygote.as_ref().is_some_and(|z| z.wipe().is_err()) {
                self.zygote = None;
            }
        } else if workdir != self.shared.work_root {
            let _ = sys::remove_tree(&workdir);
        }
        let tests =
            results.into_iter().map(|r| r.unwrap_or_else(|| TestResult::bare(Verdict::Skipped, skip_reason))).collect();
        ProgramResult { tests, starts, wall_s: started.elapsed().as_secs_f64() }
    }

    /// Whether a live zygote is ready (started here if needed).
    fn ensure_zygote(&mut self) -> bool {
        if !self.shared.use_zygote {
            return false;
        }
        if self.zygote.is_none() {
            self.counter += 1;
            let dir = self.shared.work_root.join(format!("{}-z{}", self.name, self.counter));
            self.zygote = Zygote::start(self.shared, &mut self.stacks, dir).ok();
        }
        self.zygote.is_some()
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
    fn start(
        &mut self,
        program: &Program,
        first: usize,
        deadline: Instant,
        workdir: &Path,
        use_zygote: bool,
        results: &mut [Option<TestResult>],
    ) -> usize {
        self.zygote_cleaned = false;
        let next = self.start_once(program, first, deadline, workdir, use_zygote, results);
        if use_zygote && !self.zygote_cleaned && self.zygote.as_ref().is_none_or(|z| z.clean().is_err()) {
            self.zygote = None; // gone or broken: the next program starts a new one
        }
        next
    }

    fn start_once(
        &mut self,
        program: &Program,
        first: usize,
        deadline: Instant,
        workdir: &Path,
        use_zygote: bool,
        results: &mut [Option<TestResult>],
    ) -> usize {
        let shared = self.shared;
        let cfg = &shared.cfg;
        let n = program.num_tests();
        let fail_all = |results: &mut [Option<TestResult>], msg: String| {
            for r in results[first..].iter_mut() {
                *r = Some(TestResult::bare(Verdict::SandboxError, msg.clone()));
            }
            n
        };
        // The start's mode, code, setup, one item per remaining test, and each test's expected stdout.
        type Parts<'p> = (Mode, &'p str, &'p str, Vec<&'p [u8]>, Vec<Option<&'p [u8]>>);
        let (mode, code, setup, items, expected): Parts<'_> = match program {
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
        // Both processes of a function-mode start get the same limits, directory and fence.
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
        let zygote = if use_zygote { self.zygote.as_ref() } else { None };
        if zygote.is_some() {
            // One count for the zygote's user namespace (see `zygote.rs`); a stdio start adds only
            // the zygote itself to the processes a spawned harness would have counted.
            rlimits.retain(|&(r, _)| r != libc::RLIMIT_NPROC);
            if namespaced {
                let extra = if mode == Mode::Function { 3 } else { 1 };
                rlimits.push((libc::RLIMIT_NPROC, cfg.max_processes + extra));
            }
        }
        // A spawned start's fence; a stdio start forked from the zygote adds it to the zygote's
        // (whose writable directory is the one around `workdir`), so it may write in `workdir` only.
        let ruleset = match &shared.fence {
            Some(fence)
                if (zygote.is_none() || mode == Mode::Stdio) && !matches!(shared.isolation, Isolation::None) =>
            {
                match fence.ruleset(workdir) {
                    Ok(fd) => Some(fd),
                    Err(e) => return fail_all(results, format!("landlock ruleset: {e}")),
                }
            }
            _ => None,
        };
        // Function mode: the program gets a process of its own, reached by the harness (the
        // checker) through this pipe pair only; it never holds the control or result pipes.
        let call = if mode == Mode::Function {
            match (sys::pipe(), sys::pipe()) {
                (Ok(req), Ok(rep)) => Some((req, rep)),
                _ => return fail_all(results, "could not create pipes".into()),
            }
        } else {
            None
        };
        let landlock = ruleset.as_ref().map(|fd| fd.as_raw_fd());
        let limits: &[(libc::__rlimit_resource_t, u64)] =
            if matches!(shared.isolation, Isolation::None) { &[] } else { &rlimits };
        let (env, cwd) = (&env[..], &cwd);
        let stacks = &mut self.stacks;
        let mut spawn_one = |stdio: &[RawFd]| -> Result<Proc, String> {
            let argv = &shared.argv[..];
            let mut filter = shared.filter.clone(); // each child patches its own pid into its copy
            let isolation = match &shared.isolation {
                Isolation::None => None,
                iso => Some(spawn::Isolation {
                    namespaces: if let Isolation::Namespaces(ns) = iso { Some(ns) } else { None },
                    landlock,
                    seccomp: filter.as_mut().map(|f| (f.programs.as_mut_slice(), f.slots.as_slice())),
                    drop_capabilities: shared.drop_capabilities,
                }),
            };
            let request = Request { exe: &shared.python, argv, env, cwd, stdio, rlimits: limits, isolation };
            spawn::spawn(request, stacks).map(Proc::Spawned)
        };
        let std3 = [devnull.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
        // A zygote forks both in one round trip (function mode: `call` is there).
        let mut forked = match (zygote, &call) {
            (Some(z), Some(((req_r, req_w), (rep_r, rep_w)))) => {
                let program = [std3[0], std3[1], std3[2], req_r.as_raw_fd(), rep_w.as_raw_fd()];
                let checker = [
                    std3[0],
                    std3[1],
                    std3[2],
                    ctl_r.as_raw_fd(),
                    res_w.as_raw_fd(),
                    req_w.as_raw_fd(),
                    rep_r.as_raw_fd(),
                ];
                match z.fork_pair(&program, &checker, limits) {
                    Ok(pair) => pair.map(|(pidfd, pid)| Some(Proc::Forked { pidfd, pid, info: Cell::new(None) })),
                    Err(e) => return fail_all(results, format!("zygote: {e}")),
                }
            }
            // Stdio mode: the harness alone, which runs the program in itself as a spawned one does.
            (Some(z), None) => {
                let harness = [std3[0], std3[1], std3[2], ctl_r.as_raw_fd(), res_w.as_raw_fd()];
                match z.fork_one(&harness, landlock, limits) {
                    Ok((pidfd, pid)) => [None, Some(Proc::Forked { pidfd, pid, info: Cell::new(None) })],
                    Err(e) => return fail_all(results, format!("zygote: {e}")),
                }
            }
            _ => [None, None],
        };
        // The program's process first: its start and load are the longer path.
        let program_child = match &call {
            _ if forked[0].is_some() => forked[0].take(),
            Some(((req_r, req_w), (_, rep_w))) => {
                match spawn_one(&[std3[0], std3[1], std3[2], req_r.as_raw_fd(), rep_w.as_raw_fd()][..]) {
                    // Its code goes first into its request pipe (blocking: it is reading), before the
                    // checker exists to write there (a forked one has it already).
                    Ok(child) => match if zygote.is_some() {
                        Ok(())
                    } else {
                        sys::write_all(req_w.as_raw_fd(), &shared.candidate_code)
                    } {
                        Ok(()) => Some(child),
                        Err(e) => {
                            reap(&child, &shared.isolation, zygote);
                            return fail_all(results, format!("writing the program process's code: {e}"));
                        }
                    },
                    Err(e) => return fail_all(results, format!("spawn: {e}")),
                }
            }
            None => None,
        };
        let mut stdio = vec![std3[0], std3[1], std3[2], ctl_r.as_raw_fd(), res_w.as_raw_fd()];
        if let Some(((_, req_w), (rep_r, _))) = &call {
            stdio.extend([req_w.as_raw_fd(), rep_r.as_raw_fd()]);
        }
        let spawned = match forked[1].take() {
            Some(proc) => Ok(proc),
            None => spawn_one(&stdio[..]),
        };
        drop((ctl_r, res_w, out_w, err_w, devnull, ruleset, call));
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(p) = &program_child {
                    reap(p, &shared.isolation, zygote);
                }
                return fail_all(results, format!("spawn: {e}"));
            }
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
            pending: if zygote.is_some() { control } else { [shared.harness_code.as_slice(), &control].concat() },
            written: 0,
            cur: first,
            loaded: false,
            case_start: Instant::now(),
        };
        let program_fd = program_child.as_ref().map_or(-1, |c| c.pidfd());
        let mut stop = session.pump(&io, [child.pidfd(), program_fd], deadline, results);

        // Whom to blame for an exit. The program's process ending makes the checker exit with
        // CHANNEL_BROKEN too, possibly first: then the program's exit (if it comes) is the cause.
        let mut blame_program = false;
        if matches!(stop, Stop::Exited) && program_fd >= 0 {
            let checker = sys::poll_readable(child.pidfd(), 0).then(|| child.ended(zygote));
            let broken = matches!(checker, Some(Some(ExitInfo { code: Some(protocol::CHANNEL_BROKEN), .. })));
            let program_ended = sys::poll_readable(program_fd, if broken { 100 } else { 0 });
            blame_program = program_ended && (checker.is_none() || broken);
            if broken && !program_ended {
                stop = Stop::Channel;
            }
        }
        if let Some(z) = zygote {
            // One round trip: the zygote reaps both (killed here first) and every leftover.
            let procs: Vec<&Proc> = program_child.iter().chain([&child]).collect();
            let pending: Vec<i32> = procs.iter().filter_map(|p| p.pending_pid()).collect();
            procs.iter().for_each(|p| sys::pidfd_kill(p.pidfd()));
            match z.end(&pending) {
                Ok(infos) => {
                    procs.iter().filter(|p| p.pending_pid().is_some()).zip(infos).for_each(|(p, i)| p.set_ended(i));
                    self.zygote_cleaned = true;
                }
                Err(_) => procs.iter().for_each(|p| p.set_ended(None)),
            }
        }
        let program_info = program_child.as_ref().and_then(|p| reap(p, &shared.isolation, zygote));
        let info = reap(&child, &shared.isolation, zygote);
        session.drain(&io, results);
        let info = if blame_program { program_info } else { info };
        session.finish(stop, info, !blame_program, cpu_limit, results)
    }
}
