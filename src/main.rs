//! The binary: everything is in the library (`lib.rs`).

#![deny(unsafe_code)]

/// The static (musl) build allocates through dlmalloc: musl's own allocator maps and unmaps
/// memory for small allocations (126 mmap/munmap calls in a run of `-- true`, against 17), and
/// mimalloc's start-up (arenas, huge pages) cost more than it saved. See BENCHMARKS.md.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> std::process::ExitCode {
    redlock_run::main()
}
