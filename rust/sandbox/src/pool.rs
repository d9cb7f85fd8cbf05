//! `Sandbox`: probes the machine once, then runs batches of programs on a pool of worker threads.
//!
//! Construction: resolve the interpreter, make the work root (0700), probe the kernel
//! (`KernelFeatures`: Landlock ABI, user namespaces, seccomp), make the shared namespaces, and run a
//! self-test program through the full isolation. If the namespaced self-test fails, the reason goes
//! into `IsolationReport::warning` and the fallback (no namespaces) is tested instead, unless
//! `require_namespaces` makes it an error (`require_landlock`: a Landlock older than the ABI that
//! gives every layer, checked before anything starts). Every layer the machine lacks is named in
//! `IsolationReport::missing` (typed) and in `warning`: nothing missing is accepted silently.
//!
//! Threads: `workers` OS threads each run one execution at a time (a blocking poll loop). Batches
//! from several callers interleave fairly through one job queue. `run_batch` blocks its caller until
//! its programs are done; results come back in input order. Closing (or dropping) the sandbox lets
//! running executions finish, joins the workers and removes the work root.

use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::config::SandboxConfig;
use crate::error::{Result, SandboxError};
use crate::landlock::Fence;
use crate::namespaces;
use crate::probe::{landlock_gaps, IsolationReport, KernelFeatures, Missing, LANDLOCK_FULL_ABI};
use crate::program::{Program, ProgramResult, StdioCase, TestResult, Verdict};
use crate::protocol::{BOOT, CANDIDATE, COMPILER, HARNESS, ZYGOTE};
use crate::run::{ChildFilter, Isolation, Shared, Worker};
use crate::seccomp;
use crate::spawn::Stacks;
use crate::sys;

type Job = (usize, Program, Sender<(usize, ProgramResult)>);

pub struct Sandbox {
    shared: Arc<Shared>,
    /// The process that made the pool: a forked copy of it has no worker threads.
    owner_pid: u32,
    jobs: Mutex<Option<Sender<Job>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    report: IsolationReport,
}

fn make_work_root(cfg: &SandboxConfig) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = cfg.tmp_root.as_ref().map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let tag: [u8; 6] = sys::random_bytes();
    let name =
        format!("atgrpo-sandbox-{}-{}", std::process::id(), tag.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let root = base.join(name);
    std::fs::DirBuilder::new().mode(0o700).create(&root).map_err(|e| {
        SandboxError::InvalidConfig(format!("cannot create a work directory in {}: {e}", base.display()))
    })?;
    // Landlock and the bind mount need the real path (no symlinks such as /tmp -> /private/tmp).
    root.canonicalize().map_err(|e| SandboxError::InvalidConfig(format!("{}: {e}", root.display())))
}

/// The interpreter's prefix (where its standard library lives), before and after symlinks.
fn python_prefixes(python: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for p in [Some(python.to_path_buf()), python.canonicalize().ok()].into_iter().flatten() {
        if let Some(prefix) = p.parent().and_then(Path::parent) {
            if prefix != Path::new("/") && !v.contains(&prefix.to_path_buf()) {
                v.push(prefix.to_path_buf());
            }
        }
    }
    v
}

/// The harness scripts as `len:u32 marshal` blobs for `BOOT`, compiled by the interpreter that will
/// run them (the marshal format belongs to its version).
fn compile_scripts(python: &Path, scripts: &[&str]) -> Result<Vec<Vec<u8>>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let failed =
        |e: String| SandboxError::Unavailable(format!("{} could not compile the harness: {e}", python.display()));
    let mut child = Command::new(python)
        .args(["-I", "-S", "-c", COMPILER])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(e.to_string()))?;
    let input = scripts.join("\0");
    let writer = child.stdin.take().map(|mut stdin| std::thread::spawn(move || stdin.write_all(input.as_bytes())));
    let out = child.wait_with_output().map_err(|e| failed(e.to_string()))?;
    let _ = writer.map(|w| w.join());
    if !out.status.success() {
        return Err(failed(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    let (mut blobs, mut rest) = (Vec::new(), out.stdout.as_slice());
    while rest.len() >= 4 {
        let n = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize + 4;
        if rest.len() < n {
            break;
        }
        blobs.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    if blobs.len() != scripts.len() || !rest.is_empty() {
        return Err(failed("malformed compiler output".into()));
    }
    Ok(blobs)
}

/// Runs a trivial program through the chosen isolation, with generous time limits (a tight
/// `timeout_s` on a loaded machine must not pass for "this kernel cannot sandbox").
/// The filter program a zygote's child adds (the deny list with `no_children`), as the bytes of its
/// `sock_filter`s and its pid slots, for `zygote.py` to patch and install.
fn child_filter(filter: Option<seccomp::Filter>) -> Option<ChildFilter> {
    let f = filter?;
    let bytes = f.programs[0]
        .iter()
        .flat_map(|i| [&i.code.to_le_bytes()[..], &[i.jt, i.jf], &i.k.to_le_bytes()].concat())
        .collect();
    let slots = f.slots.iter().map(|&(_, i, slot)| (i, u8::from(slot == seccomp::Slot::NegPid))).collect();
    Some((bytes, slots))
}

/// Whether the self-test ran in a zygote (`Ok(true)`); a zygote that fails turns them off.
fn self_test(shared: &mut Shared) -> std::result::Result<bool, String> {
    let zygote = self_test_once(shared)?;
    if shared.use_zygote && !zygote {
        shared.use_zygote = false;
    }
    Ok(zygote)
}

fn self_test_once(shared: &mut Shared) -> std::result::Result<bool, String> {
    let program =
        Program::Function { code: "x = 6 * 7\n".into(), setup: String::new(), tests: vec!["assert x == 42".into()] };
    let stacks = Stacks::new().map_err(|e| e.to_string())?;
    let limits = (shared.cfg.timeout_s, shared.cfg.program_timeout_s);
    shared.cfg.timeout_s = limits.0.max(30.0);
    shared.cfg.program_timeout_s = limits.1.max(30.0);
    let mut worker =
        Worker { shared, stacks, name: "selftest".into(), counter: 0, zygote: None, zygote_cleaned: false };
    let result = worker.run(&program);
    let zygote = worker.zygote.is_some();
    // Stdio programs fork from the same zygote with a request of their own: tested too, so that a
    // machine where it fails spawns their interpreters instead (as before) rather than failing them.
    let stdio_ok = !(zygote && worker.shared.cfg.stdio_zygote && result.tests[0].verdict == Verdict::Passed) || {
        let stdio = Program::Stdio {
            code: "print(6 * 7)\n".into(),
            cases: vec![StdioCase { stdin: Vec::new(), expected: Some(b"42\n".to_vec()) }],
        };
        worker.run(&stdio).tests[0].verdict == Verdict::Passed
    };
    worker.zygote.take();
    (shared.cfg.timeout_s, shared.cfg.program_timeout_s) = limits;
    if !stdio_ok {
        shared.cfg.stdio_zygote = false;
    }
    let t = &result.tests[0];
    if t.verdict == Verdict::Passed {
        return Ok(zygote);
    }
    let tail: String =
        t.stderr_tail.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ");
    Err(format!("self-test program got {}: {} {}", t.verdict.as_str(), t.detail, tail).trim_end().to_string())
}

impl Sandbox {
    pub fn new(cfg: SandboxConfig) -> Result<Self> {
        Self::with_kernel(cfg, KernelFeatures::probe())
    }

    /// `new` on a kernel described by `kernel` instead of the probed one (see `KernelFeatures`).
    pub fn with_kernel(cfg: SandboxConfig, kernel: KernelFeatures) -> Result<Self> {
        cfg.validate()?;
        let python_path = cfg.resolve_python()?;
        let python = sys::path_cstring(&python_path).map_err(|e| SandboxError::InvalidConfig(e.to_string()))?;
        let argv = [
            python.clone(),
            CString::from(c"-I"),
            CString::from(c"-S"),
            CString::from(c"-c"),
            CString::new(BOOT).unwrap(),
        ]
        .to_vec();
        let mut compiled = compile_scripts(&python_path, &[HARNESS, CANDIDATE, ZYGOTE])?.into_iter();
        let mut next = || compiled.next().unwrap_or_default();
        let (harness_code, candidate_code, zygote_code) = (next(), next(), next());
        let work_root = make_work_root(&cfg)?;
        let isolated = !cfg.unsafe_no_isolation;
        let abi = if isolated { kernel.landlock_abi } else { 0 };
        let gaps = landlock_gaps(abi);
        if cfg.require_landlock && !gaps.is_empty() {
            let lines: Vec<&str> = gaps.iter().map(|(_, note)| *note).collect();
            return Err(SandboxError::Unavailable(format!(
                "require_landlock is set but the kernel offers Landlock ABI {abi} (every layer needs {LANDLOCK_FULL_ABI}): {}",
                lines.join("; ")
            )));
        }
        let mut read_paths: Vec<PathBuf> = cfg.read_paths.iter().map(PathBuf::from).collect();
        read_paths.extend(python_prefixes(&python_path));
        let fence = if abi > 0 {
            Some(Fence::new(&read_paths, abi).map_err(|e| SandboxError::Unavailable(format!("landlock paths: {e}")))?)
        } else {
            None
        };
        let has_seccomp = isolated && kernel.seccomp;
        let filter = |no_children: bool| -> Result<Option<seccomp::Filter>> {
            has_seccomp.then(|| seccomp::build(no_children)).transpose().map_err(SandboxError::Unavailable)
        };
        let is_root = unsafe { libc::geteuid() } == 0;
        let mut report = IsolationReport {
            mode: "none",
            per_execution_namespaces: false,
            shared_namespaces: false,
            readonly_root: false,
            landlock_abi: abi,
            seccomp: has_seccomp,
            child_processes: !isolated,
            capabilities_dropped: false,
            rlimits: isolated,
            zygote: false,
            stdio_zygote: false,
            missing: Vec::new(),
            warning: None,
            python: python_path.display().to_string(),
        };
        let mut shared = Shared {
            cfg: cfg.clone(),
            python,
            argv,
            harness_code,
            candidate_code,
            work_root,
            isolation: Isolation::None,
            fence,
            filter: None,
            drop_capabilities: false,
            zygote_code,
            zygote_filter: None,
            child_filter: None,
            use_zygote: false,
        };
        if !isolated {
            report.warning =
                Some("unsafe_no_isolation: programs run without any isolation (benchmark reference only)".into());
            self_test(&mut shared).map_err(SandboxError::Unavailable)?;
            return Ok(Self::start(shared, report));
        }

        let mut why_not = if !cfg.namespaces {
            Some("namespaces disabled by config".to_string())
        } else if !kernel.user_namespaces {
            Some("user namespaces unavailable (user.max_user_namespaces is 0)".to_string())
        } else {
            None
        };
        if why_not.is_none() {
            match namespaces::create(&shared.work_root) {
                Ok(ns) => {
                    let readonly = ns.readonly_root;
                    shared.isolation = Isolation::Namespaces(ns);
                    // RLIMIT_NPROC never applies to uid 0 (the kernel exempts root's user_struct,
                    // whatever the user namespace), so as root children cannot be counted: refuse them.
                    shared.filter = filter(is_root)?;
                    shared.zygote_filter = filter(false)?;
                    shared.child_filter = child_filter(if is_root { filter(true)? } else { None });
                    shared.use_zygote = true;
                    match self_test(&mut shared) {
                        Ok(zygote) => {
                            report.zygote = zygote;
                            report.mode = "namespaces";
                            report.per_execution_namespaces = true;
                            report.shared_namespaces = true;
                            report.readonly_root = readonly;
                            report.child_processes = !is_root || !has_seccomp;
                            let mut notes = Vec::new();
                            if !readonly {
                                report.missing.push(Missing::ReadonlyRoot);
                                notes.push("mount_setattr unavailable: the root file system is not read-only");
                            }
                            for (layer, note) in landlock_gaps(abi) {
                                report.missing.push(layer);
                                notes.push(note);
                            }
                            if !has_seccomp {
                                report.missing.push(Missing::Seccomp);
                                notes.push(if is_root {
                                    "running as root without seccomp: child processes are not bounded, sockets are not blocked"
                                } else {
                                    "no seccomp: sockets are blocked by the empty network namespace only"
                                });
                            }
                            report.warning = (!notes.is_empty()).then(|| notes.join("; "));
                            return Ok(Self::start(shared, report));
                        }
                        Err(e) => why_not = Some(format!("namespaced execution failed ({e})")),
                    }
                }
                Err(e) => why_not = Some(format!("namespaces unavailable: {e}")),
            }
        }
        let reason = why_not.unwrap_or_default();
        if cfg.require_namespaces {
            return Err(SandboxError::Unavailable(format!("require_namespaces is set but {reason}")));
        }
        shared.isolation = Isolation::Fallback;
        shared.filter = filter(true)?;
        shared.zygote_filter = filter(false)?;
        shared.child_filter = child_filter(filter(true)?);
        shared.use_zygote = true;
        shared.drop_capabilities = is_root;
        report.zygote = self_test(&mut shared)
            .map_err(|e| SandboxError::Unavailable(format!("{reason}; fallback failed too: {e}")))?;
        report.mode = "fallback";
        report.capabilities_dropped = is_root;
        report.missing.push(Missing::Namespaces);
        let mut missing = vec!["no pid/user/network/mount namespaces; child processes are refused"];
        for (layer, note) in landlock_gaps(abi) {
            report.missing.push(layer);
            missing.push(note);
        }
        if !has_seccomp {
            report.missing.push(Missing::Seccomp);
            missing.push("no seccomp: sockets and child processes are not blocked");
        }
        report.warning = Some(format!("{reason}; {}", missing.join("; ")));
        Ok(Self::start(shared, report))
    }

    fn start(shared: Shared, mut report: IsolationReport) -> Self {
        report.stdio_zygote = report.zygote && shared.cfg.stdio_zygote;
        let shared = Arc::new(shared);
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let workers = (0..shared.cfg.workers)
            .map(|i| {
                let shared = Arc::clone(&shared);
                let rx = Arc::clone(&rx);
                std::thread::Builder::new()
                    .name(format!("atgrpo-sandbox-{i}"))
                    .spawn(move || worker_loop(i, &shared, &rx))
                    .expect("spawning a sandbox worker thread")
            })
            .collect();
        Self { shared, owner_pid: std::process::id(), jobs: Mutex::new(Some(tx)), workers: Mutex::new(workers), report }
    }

    pub fn isolation(&self) -> &IsolationReport {
        &self.report
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.shared.cfg
    }

    /// Runs every program (concurrently, `workers` at a time); blocks until all are done.
    pub fn run_batch(&self, programs: Vec<Program>) -> Result<Vec<ProgramResult>> {
        if std::process::id() != self.owner_pid {
            return Err(SandboxError::Unavailable(format!(
                "this sandbox belongs to process {} (this is a fork of it, without its worker threads); make a new Sandbox",
                self.owner_pid
            )));
        }
        for (i, p) in programs.iter().enumerate() {
            p.validate(i)?;
        }
        let n = programs.len();
        let (tx, rx) = channel();
        {
            let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            let sender = jobs.as_ref().ok_or(SandboxError::Closed)?;
            for (i, p) in programs.into_iter().enumerate() {
                sender.send((i, p, tx.clone())).map_err(|_| SandboxError::Closed)?;
            }
        }
        drop(tx);
        let mut out: Vec<Option<ProgramResult>> = vec![None; n];
        for (i, r) in rx {
            out[i] = Some(r);
        }
        out.into_iter().map(|r| r.ok_or(SandboxError::Closed)).collect()
    }

    /// Stops taking work, waits for queued and running executions, removes the work root. Idempotent.
    pub fn close(&self) {
        if std::process::id() != self.owner_pid {
            return; // a forked copy owns neither the workers nor the directory
        }
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in workers {
            let _ = w.join();
        }
        // Queued work has drained (the workers exit only on an empty, closed queue).
        let _ = sys::remove_tree(&self.shared.work_root);
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.close();
    }
}

fn worker_loop(index: usize, shared: &Shared, rx: &Mutex<Receiver<Job>>) {
    let stacks = Stacks::new().ok();
    let mut worker = stacks.map(|stacks| Worker {
        shared,
        stacks,
        name: format!("w{index}"),
        counter: 0,
        zygote: None,
        zygote_cleaned: false,
    });
    loop {
        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok((i, program, reply)) = job else { return };
        let result = match worker.as_mut() {
            Some(w) => catch_unwind(AssertUnwindSafe(|| w.run(&program)))
                .unwrap_or_else(|_| failed(&program, "internal error (panic) in the sandbox")),
            None => failed(&program, "could not allocate the worker's clone stacks"),
        };
        let _ = reply.send((i, result));
    }
}

fn failed(program: &Program, msg: &str) -> ProgramResult {
    ProgramResult {
        tests: vec![TestResult::bare(Verdict::SandboxError, msg); program.num_tests()],
        starts: 0,
        wall_s: 0.0,
    }
}
