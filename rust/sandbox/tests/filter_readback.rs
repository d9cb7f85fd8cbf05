//! Reads the seccomp filters back out of a running sandboxed program and checks them against what
//! the docs promise (`src/seccomp.rs`, docs/sandbox.md): the kernel's own record (`/proc/<pid>/
//! status`: `Seccomp: 2`, the number of filters), run always, and the installed BPF itself, run over
//! every syscall number. Decoding needs CAP_SYS_ADMIN (`PTRACE_SECCOMP_GET_FILTER`), so that half is
//! its own `#[ignore]`d test: `cargo test` lists it as ignored, never as passed, and `.ci/run` runs
//! it with `--ignored` where it is root; run there without the capability, it fails saying why.
//!
//! The promised list is written out here, not taken from the crate: dropping a syscall from the
//! filter, or a filter from the child, fails this test.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use atgrpo_sandbox::bpf::{self, sock_filter, AUDIT_ARCH};
use atgrpo_sandbox::{Program, Sandbox, SandboxConfig, Verdict};

/// README / seccomp.rs: refused with EPERM on every path.
const PROMISED: &[&str] = &[
    "socket",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "name_to_handle_at",
    "open_by_handle_at",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "shmget",
    "semget",
    "msgget",
    "mq_open",
    #[cfg(target_arch = "x86_64")]
    "iopl",
    #[cfg(target_arch = "x86_64")]
    "ioperm",
];
/// Refused too where child processes are not allowed (with all-zero arguments: `clone(0)` is not a
/// thread, signal targets 0 are not the program's own pid except for `kill`, which may target 0).
const NO_CHILDREN: &[&str] = &[
    "clone",
    "tkill",
    "pidfd_send_signal",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    #[cfg(target_arch = "x86_64")]
    "fork",
    #[cfg(target_arch = "x86_64")]
    "vfork",
];

fn nr(name: &str) -> u32 {
    let n = match name {
        "socket" => libc::SYS_socket,
        "ptrace" => libc::SYS_ptrace,
        "process_vm_readv" => libc::SYS_process_vm_readv,
        "process_vm_writev" => libc::SYS_process_vm_writev,
        "pidfd_getfd" => libc::SYS_pidfd_getfd,
        "bpf" => libc::SYS_bpf,
        "perf_event_open" => libc::SYS_perf_event_open,
        "userfaultfd" => libc::SYS_userfaultfd,
        "keyctl" => libc::SYS_keyctl,
        "add_key" => libc::SYS_add_key,
        "request_key" => libc::SYS_request_key,
        "io_uring_setup" => libc::SYS_io_uring_setup,
        "io_uring_enter" => libc::SYS_io_uring_enter,
        "io_uring_register" => libc::SYS_io_uring_register,
        "unshare" => libc::SYS_unshare,
        "setns" => libc::SYS_setns,
        "mount" => libc::SYS_mount,
        "umount2" => libc::SYS_umount2,
        "pivot_root" => libc::SYS_pivot_root,
        "chroot" => libc::SYS_chroot,
        "open_tree" => libc::SYS_open_tree,
        "move_mount" => libc::SYS_move_mount,
        "fsopen" => libc::SYS_fsopen,
        "fsconfig" => libc::SYS_fsconfig,
        "fsmount" => libc::SYS_fsmount,
        "fspick" => libc::SYS_fspick,
        "mount_setattr" => libc::SYS_mount_setattr,
        "name_to_handle_at" => libc::SYS_name_to_handle_at,
        "open_by_handle_at" => libc::SYS_open_by_handle_at,
        "kexec_load" => libc::SYS_kexec_load,
        "kexec_file_load" => libc::SYS_kexec_file_load,
        "init_module" => libc::SYS_init_module,
        "finit_module" => libc::SYS_finit_module,
        "delete_module" => libc::SYS_delete_module,
        "reboot" => libc::SYS_reboot,
        "swapon" => libc::SYS_swapon,
        "swapoff" => libc::SYS_swapoff,
        "acct" => libc::SYS_acct,
        "shmget" => libc::SYS_shmget,
        "semget" => libc::SYS_semget,
        "msgget" => libc::SYS_msgget,
        "mq_open" => libc::SYS_mq_open,
        #[cfg(target_arch = "x86_64")]
        "iopl" => libc::SYS_iopl,
        #[cfg(target_arch = "x86_64")]
        "ioperm" => libc::SYS_ioperm,
        "clone" => libc::SYS_clone,
        "tkill" => libc::SYS_tkill,
        "pidfd_send_signal" => libc::SYS_pidfd_send_signal,
        "tgkill" => libc::SYS_tgkill,
        "rt_sigqueueinfo" => libc::SYS_rt_sigqueueinfo,
        "rt_tgsigqueueinfo" => libc::SYS_rt_tgsigqueueinfo,
        #[cfg(target_arch = "x86_64")]
        "fork" => libc::SYS_fork,
        #[cfg(target_arch = "x86_64")]
        "vfork" => libc::SYS_vfork,
        other => panic!("no number for {other}"),
    };
    n as u32
}

fn status_field(pid: i32, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
}

/// The sandboxed processes that run a start: with a zygote, its children (the zygote is this
/// process's child); without, this process's children. Only processes under a seccomp filter.
fn filtered_processes(zygote: bool) -> Vec<i32> {
    let filtered = |pid: i32| status_field(pid, "Seccomp:").as_deref() == Some("2");
    let pids: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    let children_of = |parent: i32| -> Vec<i32> {
        let parent = parent.to_string();
        pids.iter()
            .copied()
            .filter(|&p| status_field(p, "PPid:").as_deref() == Some(parent.as_str()) && filtered(p))
            .collect()
    };
    let mine = children_of(std::process::id() as i32);
    if zygote {
        mine.into_iter().flat_map(children_of).collect()
    } else {
        mine
    }
}

const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;

/// The filters of a stopped-by-us process, in installation order; `Err` when not permitted here.
fn read_filters(pid: i32, count: usize) -> Result<Vec<Vec<sock_filter>>, String> {
    let os = || std::io::Error::last_os_error().to_string();
    unsafe {
        if libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) != 0 {
            return Err(format!("PTRACE_SEIZE: {}", os()));
        }
        libc::ptrace(libc::PTRACE_INTERRUPT, pid, 0, 0);
        let mut status = 0;
        libc::waitpid(pid, &mut status, libc::__WALL);
        let mut programs = Vec::new();
        let mut error = None;
        for i in 0..count {
            let n = libc::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, i, std::ptr::null_mut::<sock_filter>());
            if n <= 0 {
                error = Some(format!("PTRACE_SECCOMP_GET_FILTER: {}", os()));
                break;
            }
            let mut buf = vec![sock_filter { code: 0, jt: 0, jf: 0, k: 0 }; n as usize];
            libc::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, i, buf.as_mut_ptr());
            programs.push(buf);
        }
        libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
        match error {
            Some(e) => Err(e),
            None => Ok(programs.into_iter().rev().collect()), // index 0 is the newest
        }
    }
}

/// A program sleeping in a sandbox with the given `namespaces`, its report, the pids of its
/// filtered processes (function mode: two; `stdio`: the one harness the program runs in, forked
/// from the zygote too) once every filter is in, and the number of filters each must hold. The
/// caller checks what it likes, then joins the runner (the program must still pass).
fn with_running_program(
    namespaces: bool,
    stdio: bool,
    check: impl Fn(&atgrpo_sandbox::IsolationReport, &[i32], usize),
) {
    let cfg = SandboxConfig { workers: 1, timeout_s: 10.0, namespaces, ..Default::default() };
    let sandbox = std::sync::Arc::new(Sandbox::new(cfg).unwrap());
    let report = sandbox.isolation().clone();
    assert!(report.seccomp, "no seccomp on this machine: {report:?}");
    assert!(report.zygote, "the zygote failed its self-test: {report:?}");
    assert!(report.stdio_zygote, "stdio starts do not fork from the zygote: {report:?}");
    let runner = {
        let sandbox = sandbox.clone();
        let code = "import time\ntime.sleep(3)\n".to_string();
        let p = if stdio {
            Program::Stdio { code, cases: vec![atgrpo_sandbox::StdioCase { stdin: Vec::new(), expected: None }] }
        } else {
            Program::Function { code, setup: String::new(), tests: vec!["assert 1".into()] }
        };
        std::thread::spawn(move || sandbox.run_batch(vec![p]).unwrap())
    };
    // Three programs (two without x86_64's x32 guard); a zygote's children add the stricter deny
    // program where children are refused.
    let base = if cfg!(target_arch = "x86_64") { 3 } else { 2 };
    let expected_filters = base + usize::from(report.zygote && !report.child_processes);
    // A process counts as filtered from its first filter on, so a poll can land while it is still
    // installing the rest (CI saw 3 of 4 once): wait, bounded, until every one has settled; a filter
    // that is really missing still fails below, after the wait.
    let processes = if stdio { 1 } else { 2 };
    let settled =
        |pids: &[i32]| pids.len() >= processes && pids.iter().all(|&p| filter_count(p) == Some(expected_filters));
    let t0 = Instant::now();
    let mut pids = filtered_processes(report.zygote);
    while !settled(&pids) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        pids = filtered_processes(report.zygote);
    }
    // Function mode: the checker and the program's own process, both filtered; stdio: the harness.
    assert_eq!(pids.len(), processes, "sandboxed processes found: {pids:?}");
    for &pid in &pids {
        assert_eq!(filter_count(pid), Some(expected_filters), "filters installed in {pid}");
    }
    check(&report, &pids, expected_filters);
    let result = runner.join().unwrap().remove(0);
    assert_eq!(result.tests[0].verdict, Verdict::Passed, "{:?}", result.tests[0]);
}

fn filter_count(pid: i32) -> Option<usize> {
    status_field(pid, "Seccomp_filters:").and_then(|v| v.parse::<usize>().ok())
}

/// Decodes each process's filters and runs them over every syscall number.
fn decode_and_check(namespaces: bool, report: &atgrpo_sandbox::IsolationReport, pids: &[i32], count: usize) {
    let mut expected: BTreeSet<u32> = PROMISED.iter().map(|n| nr(n)).collect();
    if !report.child_processes {
        expected.extend(NO_CHILDREN.iter().map(|n| nr(n)));
    }
    for &pid in pids {
        let programs = read_filters(pid, count).unwrap_or_else(|e| {
            panic!("cannot decode the filters of {pid} ({e}): this test needs CAP_SYS_ADMIN; without it run only the unprivileged tests")
        });
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let run = |nr: u32, a0: u64| bpf::verdict(&programs, AUDIT_ARCH, nr, [a0, 0, 0, 0, 0, 0]);
        let refused: BTreeSet<u32> = (0..1024).filter(|&n| run(n, 0) == eperm).collect();
        assert_eq!(refused, expected, "EPERM set of {pid} (namespaces={namespaces}, {report:?})");
        let clone3 = libc::SYS_clone3 as u32;
        for n in (0..1024).filter(|n| !expected.contains(n) && *n != clone3) {
            assert_eq!(run(n, 0), libc::SECCOMP_RET_ALLOW, "syscall {n} in {pid}");
        }
        assert_eq!(run(clone3, 0), libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        assert_eq!(run(libc::SYS_clone as u32, (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64), eperm);
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        assert_eq!(run(libc::SYS_clone as u32, thread), libc::SECCOMP_RET_ALLOW);
        assert_eq!(bpf::verdict(&programs, 0x4000_0003, libc::SYS_read as u32, [0; 6]), libc::SECCOMP_RET_KILL_PROCESS);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(run(0x4000_0000 | libc::SYS_socket as u32, 0), libc::SECCOMP_RET_KILL_PROCESS);
        if !report.child_processes {
            // The pid the child patched in is its own, as it sees itself (1 in its pid namespace).
            let own: u64 = status_field(pid, "NSpid:").unwrap().split_whitespace().last().unwrap().parse().unwrap();
            assert_eq!(run(libc::SYS_kill as u32, own), libc::SECCOMP_RET_ALLOW);
            assert_eq!(run(libc::SYS_kill as u32, (own as i32).wrapping_neg() as u32 as u64), libc::SECCOMP_RET_ALLOW);
            assert_eq!(run(libc::SYS_kill as u32, own + 1), eperm);
            assert_eq!(run(libc::SYS_tgkill as u32, own), libc::SECCOMP_RET_ALLOW);
        }
    }
}

// Each test covers both paths in turn: the processes are found as this process's children, so two
// sandboxes running at once would see each other's. The two tests below share that risk, so the
// privileged one is ignored by default and run alone (`--ignored`).

/// Unprivileged: the kernel's own count of installed filters, on both paths.
#[test]
fn every_sandboxed_process_holds_the_promised_number_of_filters_on_both_paths() {
    for namespaces in [true, false] {
        for stdio in [false, true] {
            with_running_program(namespaces, stdio, |_, _, _| {});
        }
    }
}

/// Privileged: the installed BPF decoded and run over every syscall number, on both paths.
#[test]
#[ignore = "needs CAP_SYS_ADMIN (PTRACE_SECCOMP_GET_FILTER): cargo test -p atgrpo-sandbox --test filter_readback -- --ignored"]
fn the_installed_filters_refuse_what_the_docs_promise_on_both_paths() {
    for namespaces in [true, false] {
        for stdio in [false, true] {
            with_running_program(namespaces, stdio, |report, pids, count| {
                decode_and_check(namespaces, report, pids, count)
            });
        }
    }
}
