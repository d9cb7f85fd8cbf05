//! A reader of seccomp programs: runs classic BPF over a `seccomp_data` the way the kernel does, so
//! that tests can ask "what happens to syscall N with these arguments" of a compiled filter, or of
//! one read back out of a running program (`tests/filter_readback.rs`).
//!
//! Only the instructions seccomp filters use are understood (absolute word loads from
//! `seccomp_data`, `and` with a constant, constant jumps, constant returns); anything else is an
//! error, never a guess. Not used on any path that runs programs.

pub use crate::seccomp::sock_filter;

#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 0xc000_00b7;

/// The `seccomp_data` word at byte offset `off`: nr, arch, instruction pointer (0 here), args.
fn load(off: u32, arch: u32, nr: u32, args: &[u64; 6]) -> Result<u32, String> {
    Ok(match off {
        0 => nr,
        4 => arch,
        8 | 12 => 0,
        16..=60 if off % 4 == 0 => {
            let a = args[((off - 16) / 8) as usize];
            if (off - 16) % 8 == 0 {
                a as u32
            } else {
                (a >> 32) as u32
            }
        }
        _ => return Err(format!("load from offset {off}")),
    })
}

/// What one program returns for the call.
pub fn run(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> Result<u32, String> {
    let (mut pc, mut acc) = (0usize, 0u32);
    while let Some(ins) = prog.get(pc) {
        pc += 1;
        match ins.code {
            0x20 => acc = load(ins.k, arch, nr, &args)?, // ld w abs
            0x54 => acc &= ins.k,                        // alu and k
            0x05 => pc += ins.k as usize,                // ja
            0x15 | 0x25 | 0x35 | 0x45 => {
                let hit = match ins.code {
                    0x15 => acc == ins.k,
                    0x25 => acc > ins.k,
                    0x35 => acc >= ins.k,
                    _ => acc & ins.k != 0,
                };
                pc += if hit { ins.jt } else { ins.jf } as usize;
            }
            0x06 => return Ok(ins.k), // ret k
            c => return Err(format!("instruction {pc}: opcode {c:#x} is not one a seccomp filter here uses")),
        }
    }
    Err("ran off the end of the program".into())
}

/// The kernel's verdict over stacked programs: the most severe action wins (signed comparison of
/// the action bits, as in `seccomp_run_filters`); among equals, the last installed. `programs` in
/// installation order.
pub fn verdict(programs: &[Vec<sock_filter>], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
    let mut best = libc::SECCOMP_RET_ALLOW;
    for p in programs.iter().rev() {
        let r = run(p, arch, nr, args).unwrap_or_else(|e| panic!("{e}"));
        if ((r & libc::SECCOMP_RET_ACTION_FULL) as i32) < ((best & libc::SECCOMP_RET_ACTION_FULL) as i32) {
            best = r;
        }
    }
    best
}
