//! The seccomp filters installed right before `execve`, compiled by `seccompiler` (Firecracker's
//! filter compiler) in the parent; the vfork child only fills in its pid and installs them.
//!
//! What the filters promise (`tests/filter_readback.rs` reads the installed programs back out of a
//! running program and checks exactly this list):
//! - refused with EPERM, always: `socket` (no network or unix-socket connections, whatever the
//!   namespaces), `ptrace`, `process_vm_readv`, `process_vm_writev`, `pidfd_getfd`, `bpf`,
//!   `perf_event_open`, `userfaultfd`, `keyctl`, `add_key`, `request_key`, `io_uring_setup`,
//!   `io_uring_enter`, `io_uring_register` (io_uring can open sockets without `socket`), `unshare`,
//!   `setns`, `mount`, `umount2`, `pivot_root`, `chroot`, `open_tree`, `move_mount`, `fsopen`,
//!   `fsconfig`, `fsmount`, `fspick`, `mount_setattr`, `name_to_handle_at`, `open_by_handle_at`,
//!   `kexec_load`, `kexec_file_load`, `init_module`, `finit_module`, `delete_module`, `reboot`,
//!   `swapon`, `swapoff`, `acct`, `shmget`, `semget`, `msgget`, `mq_open` (SysV IPC and message
//!   queues would outlive a program in its worker's ipc namespace), and on x86_64 `iopl`, `ioperm`;
//! - `clone` with any namespace flag: EPERM; `clone3`: ENOSYS (libc falls back to `clone`, whose
//!   flags a filter can read);
//! - a foreign syscall ABI (i386, and x32 on x86_64) kills the process;
//! - with `no_children` (no namespaces, or root, where RLIMIT_NPROC does not apply, so the number
//!   of processes cannot be bounded): `clone` without `CLONE_THREAD`, `fork`, `vfork`, `tkill` and
//!   `pidfd_send_signal` are refused too (threads stay allowed), and `kill` may only target 0, the
//!   program's own pid or its own group, `tgkill` / `rt_sigqueueinfo` / `rt_tgsigqueueinfo` only
//!   its own pid.
//!
//! Three programs, stacked (the kernel runs all and keeps the most severe verdict):
//! 1. the deny list above, EPERM (`seccompiler`: one filter has one match action);
//! 2. `clone3` -> ENOSYS (`seccompiler`, a second match action);
//! 3. x86_64 only, kept by hand (4 instructions): syscall numbers with bit 30 set (the x32 ABI,
//!    which shares x86_64's audit arch) kill the process. `seccompiler` matches syscall numbers by
//!    equality only, so it cannot say "every number >= 0x4000_0000", and without this a kernel
//!    built with x32 support would let `socket` through under its x32 number.
//!
//! The pid of the `no_children` rules is known only in the child. The parent compiles the rules
//! with two sentinel values in place of "own pid" and "own group", finds the instructions that
//! compare against them (and checks it found exactly as many as it wrote), and the child writes
//! its pid there in its own copy (`patch_pid`: no allocation) before installing.

use std::collections::BTreeMap;

pub use seccompiler::sock_filter;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Values no syscall number, flag or action of these filters has (pids are < 2^22).
const PID_SENTINEL: u32 = 0x7e57_0001;
const NEG_PID_SENTINEL: u32 = 0x7e57_0002;

/// A placeholder the child fills in: its pid or its negation (its process group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Pid,
    NegPid,
}

#[derive(Debug, Clone)]
pub struct Filter {
    /// Installed in this order, each a complete program (arch check, rules, default).
    pub programs: Vec<BpfProgram>,
    /// `(program, instruction, slot)`: whose `k` the child sets from its pid.
    pub slots: Vec<(usize, usize, Slot)>,
}

/// The deny list (see the module docs), by name for messages and tests.
pub fn denied() -> Vec<(&'static str, libc::c_long)> {
    let mut v = vec![
        ("socket", libc::SYS_socket),
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("pidfd_getfd", libc::SYS_pidfd_getfd),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
        ("unshare", libc::SYS_unshare),
        ("setns", libc::SYS_setns),
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("chroot", libc::SYS_chroot),
        ("open_tree", libc::SYS_open_tree),
        ("move_mount", libc::SYS_move_mount),
        ("fsopen", libc::SYS_fsopen),
        ("fsconfig", libc::SYS_fsconfig),
        ("fsmount", libc::SYS_fsmount),
        ("fspick", libc::SYS_fspick),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("name_to_handle_at", libc::SYS_name_to_handle_at),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("reboot", libc::SYS_reboot),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("acct", libc::SYS_acct),
        // Objects that would outlive a program in its worker's ipc namespace (the zygote's).
        ("shmget", libc::SYS_shmget),
        ("semget", libc::SYS_semget),
        ("msgget", libc::SYS_msgget),
        ("mq_open", libc::SYS_mq_open),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([("iopl", libc::SYS_iopl), ("ioperm", libc::SYS_ioperm)]);
    v
}

const NAMESPACE_FLAGS: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

fn arg0(op: SeccompCmpOp, value: u32) -> Result<SeccompCondition, String> {
    SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, value as u64).map_err(|e| e.to_string())
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, action: SeccompAction) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, ARCH).map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// Compiles the filters. `no_children`: refuse processes (keep threads) and pin signals to self.
pub fn build(no_children: bool) -> Result<Filter, String> {
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = denied().into_iter().map(|(_, nr)| (nr, vec![])).collect();
    // clone(flags, ...): any namespace flag; without children, anything but a thread too. Rules of
    // one syscall are alternatives: any that matches refuses the call.
    let mut clone = NAMESPACE_FLAGS
        .iter()
        .map(|&f| rule(vec![arg0(SeccompCmpOp::MaskedEq(f as u32 as u64), f as u32)?]))
        .collect::<Result<Vec<_>, _>>()?;
    let mut expected_slots = 0;
    if no_children {
        clone.push(rule(vec![arg0(SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64), 0)?])?);
        #[cfg(target_arch = "x86_64")]
        for nr in [libc::SYS_fork, libc::SYS_vfork] {
            deny.insert(nr, vec![]);
        }
        for nr in [libc::SYS_tkill, libc::SYS_pidfd_send_signal] {
            deny.insert(nr, vec![]);
        }
        // kill(pid): refused unless pid is 0 (own group), own pid or minus it (own group).
        let ne = |k| arg0(SeccompCmpOp::Ne, k);
        deny.insert(libc::SYS_kill, vec![rule(vec![ne(0)?, ne(PID_SENTINEL)?, ne(NEG_PID_SENTINEL)?])?]);
        for nr in [libc::SYS_tgkill, libc::SYS_rt_sigqueueinfo, libc::SYS_rt_tgsigqueueinfo] {
            deny.insert(nr, vec![rule(vec![ne(PID_SENTINEL)?])?]);
        }
        expected_slots = 5;
    }
    deny.insert(libc::SYS_clone, clone);
    let mut programs = vec![
        compile(deny, SeccompAction::Errno(libc::EPERM as u32))?,
        compile(BTreeMap::from([(libc::SYS_clone3, vec![])]), SeccompAction::Errno(libc::ENOSYS as u32))?,
    ];
    #[cfg(target_arch = "x86_64")]
    programs.push(x32_guard());
    let mut slots = Vec::new();
    for (p, program) in programs.iter().enumerate() {
        for (i, ins) in program.iter().enumerate() {
            match ins.k {
                PID_SENTINEL => slots.push((p, i, Slot::Pid)),
                NEG_PID_SENTINEL => slots.push((p, i, Slot::NegPid)),
                _ => {}
            }
        }
    }
    if slots.len() != expected_slots || slots.iter().any(|&(p, i, _)| programs[p][i].code != JEQ_K) {
        return Err(format!(
            "seccomp: {} pid comparisons in the compiled filter, expected {expected_slots}",
            slots.len()
        ));
    }
    Ok(Filter { programs, slots })
}

const JEQ_K: u16 = 0x15;

/// The hand-written part (see the module docs): x32 syscall numbers kill the process.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    let ins = |code, k, jt, jf| sock_filter { code, jt, jf, k };
    vec![
        ins(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ins(JGE_K, 0x4000_0000, 0, 1),
        ins(RET_K, libc::SECCOMP_RET_KILL_PROCESS, 0, 0),
        ins(RET_K, libc::SECCOMP_RET_ALLOW, 0, 0),
    ]
}

/// Fills the pid slots (called in the child, on its own copy; no allocation).
pub fn patch_pid(programs: &mut [BpfProgram], slots: &[(usize, usize, Slot)], pid: i32) {
    for &(p, i, slot) in slots {
        programs[p][i].k = match slot {
            Slot::Pid => pid as u32,
            Slot::NegPid => pid.wrapping_neg() as u32,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf;

    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

    fn run(f: &Filter, nr: libc::c_long, a: u64) -> u32 {
        bpf::verdict(&f.programs, bpf::AUDIT_ARCH, nr as u32, [a, 0, 0, 0, 0, 0])
    }

    #[test]
    fn namespaced_filter_refuses_sockets_and_namespaces_only() {
        let f = build(false).unwrap();
        assert!(f.slots.is_empty());
        assert_eq!(run(&f, libc::SYS_socket, 2), EPERM);
        assert_eq!(run(&f, libc::SYS_ptrace, 0), EPERM);
        assert_eq!(run(&f, libc::SYS_read, 0), ALLOW);
        assert_eq!(run(&f, libc::SYS_execve, 0), ALLOW);
        assert_eq!(run(&f, libc::SYS_clone, libc::SIGCHLD as u64), ALLOW);
        assert_eq!(run(&f, libc::SYS_clone, (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64), EPERM);
        assert_eq!(run(&f, libc::SYS_clone3, 0), libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        assert_eq!(run(&f, libc::SYS_kill, 1), ALLOW);
        assert_eq!(
            bpf::verdict(&f.programs, 0x4000_0003, libc::SYS_read as u32, [0; 6]),
            libc::SECCOMP_RET_KILL_PROCESS
        );
        #[cfg(target_arch = "x86_64")]
        assert_eq!(run(&f, 0x4000_0000 | libc::SYS_socket, 2), libc::SECCOMP_RET_KILL_PROCESS);
    }

    #[test]
    fn fallback_filter_allows_threads_and_signals_to_self_only() {
        let mut f = build(true).unwrap();
        patch_pid(&mut f.programs, &f.slots, 4242);
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        assert_eq!(run(&f, libc::SYS_clone, thread), ALLOW);
        assert_eq!(run(&f, libc::SYS_clone, libc::SIGCHLD as u64), EPERM);
        assert_eq!(run(&f, libc::SYS_clone, thread | libc::CLONE_NEWPID as u64), EPERM);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(run(&f, libc::SYS_fork, 0), EPERM);
        assert_eq!(run(&f, libc::SYS_kill, 0), ALLOW);
        assert_eq!(run(&f, libc::SYS_kill, 4242), ALLOW);
        assert_eq!(run(&f, libc::SYS_kill, (-4242i32) as u32 as u64), ALLOW);
        assert_eq!(run(&f, libc::SYS_kill, 1), EPERM);
        assert_eq!(run(&f, libc::SYS_kill, u32::MAX as u64), EPERM); // -1: everyone
        assert_eq!(run(&f, libc::SYS_tgkill, 4242), ALLOW);
        assert_eq!(run(&f, libc::SYS_tgkill, 4243), EPERM);
        assert_eq!(run(&f, libc::SYS_socket, 1), EPERM);
        assert_eq!(run(&f, libc::SYS_write, 1), ALLOW);
    }
}
