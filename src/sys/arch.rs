//! The per-processor part: a bare system call, for code that shares the wrapper's memory.

use nix::libc;

/// A system call with up to three arguments, bare: unlike the C library's wrappers it writes
/// no `errno`, which in a process that shares the wrapper's memory is the wrapper's own (the
/// same thread-local storage), and the wrapper may be about to read it. Returns what the
/// kernel returned (a negative error number on failure).
///
/// # Safety
/// As the system call `number` with these arguments.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn bare_syscall(number: libc::c_long, a: usize, b: usize, c: usize) -> isize {
    let result: isize;
    // SAFETY: the x86-64 Linux system-call convention: number in rax, arguments in rdi, rsi,
    // rdx, the result in rax; rcx and r11 are overwritten.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => result,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    result
}

/// See the x86-64 one.
///
/// # Safety
/// As the system call `number` with these arguments.
#[cfg(target_arch = "aarch64")]
pub(super) unsafe fn bare_syscall(number: libc::c_long, a: usize, b: usize, c: usize) -> isize {
    let result: isize;
    // SAFETY: the AArch64 Linux system-call convention: number in x8, arguments in x0, x1, x2,
    // the result in x0.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") a => result,
            in("x1") b,
            in("x2") c,
            options(nostack),
        );
    }
    result
}

// Only what is built and run is offered: the spawn, the guardian's start and its raw system
// calls are tested on these two (aarch64 under qemu, `.ci/package`).
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
compile_error!(
    "redlock-run is built and tested for Linux on x86-64 and aarch64 only: its spawn and guardian \
     make raw system calls (src/sys/arch.rs) that no other target has been tested with"
);
