//! Completions and the man page are generated from the clap definition and committed; this
//! test fails when they drift from the CLI. Regenerate with:
//!
//!     UPDATE_GENERATED=1 cargo test --test generated

use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;
use redlock_run::cli::Cli;

fn check(path: &str, expected: &[u8]) -> Option<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, expected).unwrap();
        return None;
    }
    match std::fs::read(&path) {
        Ok(actual) if actual == expected => None,
        _ => Some(format!("{} is out of date", path.display())),
    }
}

#[test]
fn cli_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn completions_and_man_page_match_the_cli() {
    let mut stale = Vec::new();
    for (shell, file) in [
        (Shell::Bash, "completions/redlock-run.bash"),
        (Shell::Zsh, "completions/_redlock-run"),
        (Shell::Fish, "completions/redlock-run.fish"),
        (Shell::Elvish, "completions/redlock-run.elv"),
        (Shell::PowerShell, "completions/_redlock-run.ps1"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "redlock-run", &mut out);
        stale.extend(check(file, &out));
    }
    let mut man = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut man).unwrap();
    stale.extend(check("man/redlock-run.1", &man));
    // One page per subcommand, as git does (redlock-run-status(1), …).
    let command = Cli::command();
    for sub in command.get_subcommands() {
        // clap names take &'static str; a test can afford to leak two short strings.
        let name: &'static str = Box::leak(format!("redlock-run-{}", sub.get_name()).into_boxed_str());
        let mut page = Vec::new();
        clap_mangen::Man::new(sub.clone().name(name)).render(&mut page).unwrap();
        stale.extend(check(&format!("man/{name}.1"), &page));
    }
    assert!(
        stale.is_empty(),
        "{}\nregenerate with: UPDATE_GENERATED=1 cargo test --test generated",
        stale.join("\n")
    );
}
