//! The binary: everything is in the library (`lib.rs`), whose CLI definition the tests that
//! generate completions and man pages read too.

/// The static (musl) build allocates through mimalloc: musl's own allocator maps and unmaps
/// memory for small allocations (126 mmap/munmap calls in a run of `-- true`, against 17), which
/// cost more than the static build's faster start saved. See BENCHMARKS.md.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    redlock_run::main()
}
