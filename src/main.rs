//! The binary: everything is in the library (`lib.rs`).

#![deny(unsafe_code)]
// The unit-test build keeps the test harness's `main`.
#![cfg_attr(all(target_env = "gnu", not(test)), no_main)]

/// The static (musl) build allocates through dlmalloc: musl's own allocator maps and unmaps
/// memory for small allocations (126 mmap/munmap calls in a run of `-- true`, against 17), and
/// mimalloc's start-up (arenas, huge pages) cost more than it saved. See BENCHMARKS.md.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[cfg(any(not(target_env = "gnu"), test))]
fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(redlock_run::main())
}

/// The glibc build's entry point, in place of std's start-up, whose look for the main thread's
/// stack reads /proc/self/maps at every start (`sys/start.rs`). glibc hands std the arguments
/// and the environment itself.
#[cfg(all(target_env = "gnu", not(test)))]
#[allow(unsafe_code, reason = "naming the C entry point; the function itself is safe")]
#[unsafe(no_mangle)]
extern "C" fn main(_argc: std::ffi::c_int, _argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    // std's exit flushes stdout, as returning from std's `main` would.
    std::process::exit(redlock_run::main_without_std_start().into())
}
