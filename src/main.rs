//! The binary: everything is in the library (`lib.rs`), whose CLI definition the tests that
//! generate completions and man pages read too.

fn main() -> std::process::ExitCode {
    redlock_run::main()
}
