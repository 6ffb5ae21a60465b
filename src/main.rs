//! The binary: everything is in the library (`lib.rs`).

#![deny(unsafe_code)]
// The unit-test build keeps the test harness's `main`.
#![cfg_attr(not(test), no_main)]

/// The static (musl) build allocates through dlmalloc: musl's own allocator maps and unmaps
/// memory for small allocations (126 mmap/munmap calls in a run of `-- true`, against 17), and
/// mimalloc's start-up (arenas, huge pages) cost more than it saved. See BENCHMARKS.md.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// The entry point, in place of std's start-up, which sets up a stack-overflow handler at
/// every start (on glibc by reading /proc/self/maps): `sys/start.rs`.
#[cfg(not(test))]
#[allow(unsafe_code, reason = "the C entry point: its name, and its arguments passed on")]
#[unsafe(no_mangle)]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    // SAFETY: the C library calls this with the process's arguments, which live as long as it.
    unsafe { redlock_run::as_std_starts(argc, argv) };
    // std's exit flushes stdout, as returning from std's `main` would.
    std::process::exit(redlock_run::main().into())
}

#[cfg(test)]
fn main() {}
