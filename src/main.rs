fn main() -> std::process::ExitCode {
    redlock_run::main()
}
