//! The seccomp-BPF filter installed right before `execve` (hand-assembled, no dependency).
//!
//! Always: `socket` (so no network or unix-socket connections, whatever the namespaces), `ptrace`,
//! cross-process memory access, io_uring (it can open sockets without the `socket` syscall), bpf,
//! perf, keyrings, new namespaces, mounts, modules and reboot are refused with EPERM; `clone3` gets
//! ENOSYS so that libc falls back to `clone`, whose flags a filter can read; a foreign syscall ABI
//! (x32, i386) kills the process.
//! With `no_children` (no namespaces, or running as root, where RLIMIT_NPROC does not apply) the
//! number of processes cannot be bounded, so child processes are refused too (threads stay
//! allowed), and signals may only target the program itself: the filter is a template whose pid
//! slots the child fills in with its own pid (`patch_pid`) before installing it.

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0: u32 = 16;

const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// A filled-in placeholder: the child's pid or its negation (its process group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Pid,
    NegPid,
}

#[derive(Debug, Clone)]
pub struct Filter {
    pub prog: Vec<libc::sock_filter>,
    pub slots: Vec<(usize, Slot)>,
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

fn denied() -> Vec<libc::c_long> {
    let mut v = vec![
        libc::SYS_socket,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_iopl, libc::SYS_ioperm]);
    v
}

/// Builds the filter. `no_children`: refuse processes (keep threads) and pin signals to self.
pub fn build(no_children: bool) -> Filter {
    let errno = |e: i32| RET_ERRNO | e as u32;
    let mut p = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
    ];
    let mut slots = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        // x32 syscalls have bit 30 set.
        p.push(jump(JGE_K, 0x4000_0000, 0, 1));
        p.push(stmt(RET_K, RET_KILL_PROCESS));
    }
    for nr in denied() {
        p.push(jump(JEQ_K, nr as u32, 0, 1));
        p.push(stmt(RET_K, errno(libc::EPERM)));
    }
    p.push(jump(JEQ_K, libc::SYS_clone3 as u32, 0, 1));
    p.push(stmt(RET_K, errno(libc::ENOSYS)));
    // clone(flags, ...): no new namespaces; without namespaces, threads only.
    let clone_block: Vec<libc::sock_filter> = if no_children {
        vec![
            stmt(LD_W_ABS, OFF_ARG0),
            jump(JSET_K, NAMESPACE_FLAGS, 2, 0),
            jump(JSET_K, libc::CLONE_THREAD as u32, 0, 1),
            stmt(RET_K, RET_ALLOW),
            stmt(RET_K, errno(libc::EPERM)),
        ]
    } else {
        vec![stmt(LD_W_ABS, OFF_ARG0), jump(JSET_K, NAMESPACE_FLAGS, 0, 1), stmt(RET_K, errno(libc::EPERM)), stmt(RET_K, RET_ALLOW)]
    };
    p.push(jump(JEQ_K, libc::SYS_clone as u32, 0, clone_block.len() as u8));
    p.extend(clone_block);
    if no_children {
        #[cfg(target_arch = "x86_64")]
        for nr in [libc::SYS_fork, libc::SYS_vfork] {
            p.push(jump(JEQ_K, nr as u32, 0, 1));
            p.push(stmt(RET_K, errno(libc::EPERM)));
        }
        for nr in [libc::SYS_tkill, libc::SYS_pidfd_send_signal] {
            p.push(jump(JEQ_K, nr as u32, 0, 1));
            p.push(stmt(RET_K, errno(libc::EPERM)));
        }
        // kill(pid): 0 (own group), own pid, own group; tgkill / rt_(tg)sigqueueinfo(tgid): own pid.
        p.push(jump(JEQ_K, libc::SYS_kill as u32, 0, 6));
        p.push(stmt(LD_W_ABS, OFF_ARG0));
        p.push(jump(JEQ_K, 0, 3, 0));
        slots.push((p.len(), Slot::Pid));
        p.push(jump(JEQ_K, 0, 2, 0));
        slots.push((p.len(), Slot::NegPid));
        p.push(jump(JEQ_K, 0, 1, 0));
        p.push(stmt(RET_K, errno(libc::EPERM)));
        p.push(stmt(RET_K, RET_ALLOW));
        for nr in [libc::SYS_tgkill, libc::SYS_rt_sigqueueinfo, libc::SYS_rt_tgsigqueueinfo] {
            p.push(jump(JEQ_K, nr as u32, 0, 4));
            p.push(stmt(LD_W_ABS, OFF_ARG0));
            slots.push((p.len(), Slot::Pid));
            p.push(jump(JEQ_K, 0, 1, 0));
            p.push(stmt(RET_K, errno(libc::EPERM)));
            p.push(stmt(RET_K, RET_ALLOW));
        }
    }
    p.push(stmt(RET_K, RET_ALLOW));
    Filter { prog: p, slots }
}

/// Fills the pid slots (called in the child, on its own copy; no allocation).
pub fn patch_pid(prog: &mut [libc::sock_filter], slots: &[(usize, Slot)], pid: i32) {
    for &(i, slot) in slots {
        prog[i].k = match slot {
            Slot::Pid => pid as u32,
            Slot::NegPid => pid.wrapping_neg() as u32,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny BPF interpreter for the instructions `build` emits, to check jumps land right.
    fn run(prog: &[libc::sock_filter], arch: u32, nr: i64, arg0: u64) -> u32 {
        let mut pc = 0usize;
        let mut acc = 0u32;
        loop {
            let ins = prog[pc];
            match ins.code {
                LD_W_ABS => {
                    acc = match ins.k {
                        OFF_NR => nr as u32,
                        OFF_ARCH => arch,
                        OFF_ARG0 => arg0 as u32,
                        k => panic!("load at {k}"),
                    };
                    pc += 1;
                }
                JEQ_K | JGE_K | JSET_K => {
                    let hit = match ins.code {
                        JEQ_K => acc == ins.k,
                        JGE_K => acc >= ins.k,
                        _ => acc & ins.k != 0,
                    };
                    pc += 1 + if hit { ins.jt } else { ins.jf } as usize;
                }
                RET_K => return ins.k,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    const EPERM: u32 = RET_ERRNO | libc::EPERM as u32;

    #[test]
    fn namespaced_filter_refuses_sockets_and_namespaces_only() {
        let f = build(false);
        assert!(f.slots.is_empty());
        let run = |nr, a| run(&f.prog, AUDIT_ARCH, nr, a);
        assert_eq!(run(libc::SYS_socket, 2), EPERM);
        assert_eq!(run(libc::SYS_ptrace, 0), EPERM);
        assert_eq!(run(libc::SYS_read, 0), RET_ALLOW);
        assert_eq!(run(libc::SYS_execve, 0), RET_ALLOW);
        assert_eq!(run(libc::SYS_clone, libc::SIGCHLD as u64), RET_ALLOW);
        assert_eq!(run(libc::SYS_clone, (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64), EPERM);
        assert_eq!(run(libc::SYS_clone3, 0), RET_ERRNO | libc::ENOSYS as u32);
        assert_eq!(run(libc::SYS_kill, 1), RET_ALLOW);
        assert_eq!(self::run(&f.prog, 0x4000_0003, libc::SYS_read, 0), RET_KILL_PROCESS);
    }

    #[test]
    fn fallback_filter_allows_threads_and_signals_to_self_only() {
        let mut f = build(true);
        patch_pid(&mut f.prog, &f.slots, 4242);
        let run = |nr, a| run(&f.prog, AUDIT_ARCH, nr, a);
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        assert_eq!(run(libc::SYS_clone, thread), RET_ALLOW);
        assert_eq!(run(libc::SYS_clone, libc::SIGCHLD as u64), EPERM);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(run(libc::SYS_fork, 0), EPERM);
        assert_eq!(run(libc::SYS_kill, 0), RET_ALLOW);
        assert_eq!(run(libc::SYS_kill, 4242), RET_ALLOW);
        assert_eq!(run(libc::SYS_kill, (-4242i32) as u32 as u64), RET_ALLOW);
        assert_eq!(run(libc::SYS_kill, 1), EPERM);
        assert_eq!(run(libc::SYS_kill, u32::MAX as u64), EPERM); // -1: everyone
        assert_eq!(run(libc::SYS_tgkill, 4242), RET_ALLOW);
        assert_eq!(run(libc::SYS_tgkill, 4243), EPERM);
        assert_eq!(run(libc::SYS_socket, 1), EPERM);
        assert_eq!(run(libc::SYS_write, 1), RET_ALLOW);
    }
}
