//! Completions and the man page are generated from the clap definition and committed; this
//! test fails when they drift from the CLI. Regenerate with:
//!
//!     UPDATE_GENERATED=1 cargo test --test it generated

use std::path::Path;
use std::process::Command;

use clap::CommandFactory;
use redlock_run::cli::Cli;

use crate::support::bin;

/// Every file under man/ and completions/, with the `--generate` kind that prints it.
const GENERATED: [(&str, &str); 10] = [
    ("man", "man/redlock-run.1"),
    ("man-status", "man/redlock-run-status.1"),
    ("man-release", "man/redlock-run-release.1"),
    ("man-lock", "man/redlock-run-lock.1"),
    ("man-unlock", "man/redlock-run-unlock.1"),
    ("bash", "completions/redlock-run.bash"),
    ("zsh", "completions/_redlock-run"),
    ("fish", "completions/redlock-run.fish"),
    ("elvish", "completions/redlock-run.elv"),
    ("powershell", "completions/_redlock-run.ps1"),
];

fn generate(kind: &str) -> String {
    let out = Command::new(bin()).args(["--generate", kind]).output().unwrap();
    assert!(out.status.success(), "--generate {kind}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "--generate {kind} wrote to stderr");
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn cli_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn the_committed_docs_are_what_the_binary_generates() {
    let mut stale = Vec::new();
    for (kind, file) in GENERATED {
        let expected = generate(kind);
        let path = here(file);
        if std::env::var_os("UPDATE_GENERATED").is_some() {
            std::fs::write(&path, &expected).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(expected.as_str()) {
            stale.push(format!("{file} is not what `redlock-run --generate {kind}` prints"));
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nregenerate with: UPDATE_GENERATED=1 cargo test --test it generated",
        stale.join("\n")
    );
    let listed: Vec<&str> = GENERATED.iter().map(|(_, file)| *file).collect();
    for dir in ["man", "completions"] {
        for entry in std::fs::read_dir(here(dir)).unwrap() {
            let file = format!("{dir}/{}", entry.unwrap().file_name().to_string_lossy());
            assert!(listed.contains(&file.as_str()), "{file} is not generated");
        }
    }
}

/// Every `--generate` kind the CLI offers is one of the committed files, and a bad one is a
/// usage error that lists the kinds.
#[test]
fn generate_offers_exactly_the_committed_kinds() {
    let mut cmd = Cli::command();
    cmd.build();
    let arg = cmd.get_arguments().find(|a| a.get_long() == Some("generate")).expect("--generate");
    let kinds: Vec<String> = arg.get_possible_values().iter().map(|v| v.get_name().to_owned()).collect();
    assert_eq!(kinds, GENERATED.map(|(kind, _)| kind.to_owned()));
    let out = Command::new(bin()).args(["--generate", "nroff"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("man-status"));
    // Exclusive: never half a run.
    let out = Command::new(bin()).args(["--generate", "man", "-k", "x", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    // A run never reads it from the environment.
    let out = Command::new(bin()).arg("--help").env("REDLOCK_GENERATE", "man").output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("REDLOCK_GENERATE"));
    // Nor does it read the run's variables: a wrapper's environment does not get in its way.
    let out = Command::new(bin())
        .args(["--generate", "man"])
        .envs([("REDLOCK_KEY", "k"), ("REDLOCK_TTL", "5"), ("REDLOCK_QUIET", "0"), ("REDLOCK_WAIT", "x")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), generate("man"));
}

/// README § Exit status is the table the man page prints.
#[test]
fn the_readme_shows_the_exit_status_table_of_the_man_page() {
    let page = generate("man");
    let start = page.find(".SH \"EXIT STATUS\"\n").expect("an EXIT STATUS section");
    let end = start + page[start..].find(".SH ENVIRONMENT").expect("then ENVIRONMENT");
    let unroff = |t: &str| {
        let t = t
            .replace("\\-", "-")
            .replace("\\%", "")
            .replace("\\(em", "\u{2014}")
            .replace("\\(en", "\u{2013}");
        t.replace("...", "\u{2026}").replace("\\e", "\\")
    };
    let man: Vec<(String, String)> = page[start..end]
        .split(".TP\n")
        .skip(1)
        .map(|item| {
            let (term, text) = item.split_once('\n').unwrap();
            (unroff(term.trim_start_matches("\\fB").trim_end_matches("\\fR")), unroff(text.trim_end()))
        })
        .collect();
    assert_eq!(man, exit_statuses());
}

const README: &str = include_str!("../../README.md");

/// The exit-status table of README § Exit status: (status, meaning) rows, as plain text.
fn exit_statuses() -> Vec<(String, String)> {
    let start = README.find("### Exit status").expect("README has an Exit status section");
    README[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| status"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells[0].replace('`', ""), cells[1..].join("|").replace('`', ""))
        })
        .collect()
}

#[test]
fn the_man_page_has_the_sections_people_look_for() {
    let page = generate("man");
    for section in
        [".SH DURATIONS", ".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH EXAMPLES", ".SH \"SEE ALSO\""]
    {
        assert!(page.contains(section), "{section}");
    }
    assert!(!page.contains(".SH EXTRA"));
    for kind in ["man", "man-status", "man-release", "man-lock", "man-unlock"] {
        assert!(generate(kind).is_ascii(), "{kind}: ASCII only, so that it renders in any locale");
    }
    assert!(!page.contains("redlock\\-run\\-help"), "no page for a help subcommand that does not exist");
    for var in ["REDLOCK_TTL", "REDLOCK_REDIS_URL", "REDLOCK_LOCK_KEY", "REDLOCK_FENCE"] {
        assert!(page.contains(&format!("\\fB{}\\fR", var.replace('-', "\\-"))), "{var}");
    }
    assert!(page.contains("\\fB125\\fR"), "the exit statuses");
    for sub in ["status", "release"] {
        let page = generate(&format!("man-{sub}"));
        assert!(page.contains(".SH \"EXIT STATUS\"") && page.contains("\\fBredlock\\-run\\fR(1)"), "{sub}");
        assert!(page.contains(&format!("redlock\\-run {sub}")), "{sub}: the synopsis names the real command");
    }
    assert!(!page.contains(" redis://"), "URLs are not hyphenated");
}

/// What a completion must offer for a line.
enum Offers {
    /// Exactly these words, in any order.
    Exactly(&'static [&'static str]),
    /// At least these words, and none of the second list.
    Including(&'static [&'static str], &'static [&'static str]),
}
use Offers::{Exactly, Including};

/// Lines every shell must complete the same way: the words each level accepts, the values of
/// an option, nothing for a free value, and the command's own completion after the options.
const CASES: &[(&str, Offers)] = &[
    ("redlock-run status --js", Exactly(&["--json"])),
    ("redlock-run release --f", Exactly(&["--force"])),
    ("redlock-run status --t", Including(&["--tls-insecure"], &["--ttl"])),
    ("redlock-run --on-lost ", Exactly(&["terminate", "ignore"])),
    ("redlock-run -k x --on-lost=ig", Exactly(&["ignore"])),
    ("redlock-run status -k x --log-format ", Exactly(&["text", "json"])),
    ("redlock-run -k x --ttl ", Exactly(&[])),
    ("redlock-run -vk ", Exactly(&[])),
    ("redlock-run --wa", Exactly(&["--wait"])),
    ("redlock-run st", Including(&["status", "stat"], &[])),
    ("redlock-run -k x st", Including(&["stat"], &["status"])),
    ("redlock-run -k x -- st", Including(&["stat"], &["status"])),
    ("redlock-run -k x -- --t", Exactly(&[])),
    ("redlock-run --password-file /et", Including(&["/etc"], &[])),
    ("redlock-run --redis-url redis://h:1 -k x -- cat /et", Including(&["/etc"], &[])),
    // A command called status or release, after options or `--`, is not the subcommand.
    ("redlock-run -k x -- release --f", Exactly(&[])),
    ("redlock-run -k x release --f", Exactly(&[])),
    // Nothing follows a subcommand's `--`.
    ("redlock-run status -- ", Exactly(&[])),
];

/// Cases that need the shell's completion of another command (bash: the bash-completion
/// package): a nested wrapper after `--`, and `ls` after the command name.
const COMMAND_CASES: &[(&str, Offers)] = &[
    ("redlock-run -k x -- redlock-run status --js", Exactly(&["--json"])),
    ("redlock-run -k x --redis-url redis://h:1 -- redlock-run release --fo", Exactly(&["--force"])),
    ("redlock-run -k x ls --almost-a", Exactly(&["--almost-all"])),
];

fn check_offers(shell: &str, line: &str, offers: &Offers, got: &[String]) -> Option<String> {
    let has = |w: &str| {
        got.iter()
            .any(|g| g.trim_end_matches('/') == w || g.trim_end_matches('/') == w.trim_start_matches('/'))
    };
    let ok = match offers {
        Exactly(words) => words.len() == got.len() && words.iter().all(|w| has(w)),
        Including(yes, no) => yes.iter().all(|w| has(w)) && !no.iter().any(|w| has(w)),
    };
    (!ok).then(|| format!("{shell}: {line:?} offered {got:?}"))
}

fn run_shell(program: &str, args: &[&str]) -> Vec<String> {
    let out = std::process::Command::new("timeout")
        .arg("20")
        .arg(program)
        .args(args)
        .current_dir("/")
        .output()
        .unwrap_or_else(|e| {
            panic!("{program}: {e} (the completion tests need bash, zsh, fish and bash-completion)")
        });
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Runs `complete` for every case at once (each starts a shell) and returns what was wrong.
fn each_case<'a>(
    shell: &str,
    cases: impl Iterator<Item = &'a (&'static str, Offers)>,
    complete: impl Fn(&str) -> Vec<String> + Sync,
) -> Vec<String> {
    let complete = &complete;
    std::thread::scope(|s| {
        let runs: Vec<_> =
            cases.map(|(line, offers)| (line, offers, s.spawn(move || complete(line)))).collect();
        runs.into_iter()
            .filter_map(|(line, offers, run)| check_offers(shell, line, offers, &run.join().unwrap()))
            .collect()
    })
}

fn here(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path).to_str().unwrap().to_owned()
}

#[test]
fn bash_completes_each_level_its_values_and_the_command() {
    let script = here("completions/redlock-run.bash");
    let driver = here("tests/it/completions/complete.bash");
    let registered =
        run_shell("bash", &["--norc", "-c", &format!("source {script}; complete -p redlock-run")]);
    assert_eq!(registered, ["complete -F _redlock_run redlock-run"]);
    let mut wrong = Vec::new();
    // With the bash-completion package, and on its own (a plain `source`).
    for mode in ["full", "bare"] {
        let cases = CASES.iter().chain(if mode == "full" { COMMAND_CASES } else { &[] });
        wrong.extend(each_case(&format!("bash ({mode})"), cases, |line| {
            run_shell("bash", &["--norc", &driver, &script, mode, line])
        }));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn zsh_completes_each_level_its_values_and_the_command() {
    let dir = here("completions");
    run_shell("zsh", &["-n", &format!("{dir}/_redlock-run")]);
    let capture = here("tests/it/completions/capture.zsh");
    let wrong = each_case("zsh", CASES.iter().chain(COMMAND_CASES), |line| {
        run_shell("zsh", &["-f", &capture, &dir, line])
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn fish_completes_each_level_its_values_and_the_command() {
    let script = here("completions/redlock-run.fish");
    run_shell("fish", &["-n", &script]);
    let wrong = each_case("fish", CASES.iter().chain(COMMAND_CASES), |line| {
        let got = run_shell("fish", &["-c", &format!("source {script}; complete -C {}", fish_quote(line))]);
        // fish completes `--opt=va` as `--opt=value`.
        got.iter().map(|g| g.rsplit('=').next().unwrap_or(g).to_owned()).collect()
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Descriptions are data: zsh must not run what a help text encloses in backquotes, and fish
/// must not print errors for an option prefix.
#[test]
fn completing_runs_nothing_and_prints_no_errors() {
    let zsh = std::fs::read_to_string(here("completions/_redlock-run")).unwrap();
    for line in zsh.lines().filter(|l| l.trim_start().starts_with('\'')) {
        assert!(!line.contains('`') && !line.contains("$("), "an expansion in a zsh spec: {line}");
    }
    let script = here("completions/redlock-run.fish");
    for line in ["redlock-run --", "redlock-run -k foo --on", "redlock-run -k foo -- --"] {
        let out = std::process::Command::new("fish")
            .args(["-c", &format!("source {script}; complete -C {}", fish_quote(line))])
            .output()
            .expect("fish");
        assert!(out.stderr.is_empty(), "fish {line:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

fn fish_quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}
