//! Completions and the man page are generated from the clap definition and committed; this
//! test fails when they drift from the CLI. Regenerate with:
//!
//!     UPDATE_GENERATED=1 cargo test --test it generated

use std::path::Path;

use crate::completions::{self, Model};
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
    let model = Model::new(Cli::command());
    for (file, script) in [
        ("completions/redlock-run.bash", completions::bash(&model)),
        ("completions/_redlock-run", completions::zsh(&model)),
        ("completions/redlock-run.fish", completions::fish(&model)),
    ] {
        stale.extend(check(file, script.as_bytes()));
    }
    // Elvish and PowerShell: clap_complete's scripts as they come (options and subcommands;
    // the command's own words are not completed).
    for (shell, file) in
        [(Shell::Elvish, "completions/redlock-run.elv"), (Shell::PowerShell, "completions/_redlock-run.ps1")]
    {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "redlock-run", &mut out);
        stale.extend(check(file, &out));
    }
    let mut man = Vec::new();
    clap_mangen::Man::new(for_man_page(Cli::command())).render(&mut man).unwrap();
    let man = finish_main_page(&String::from_utf8(man).unwrap());
    stale.extend(check("man/redlock-run.1", man.as_bytes()));
    // One page per subcommand, as git does (redlock-run-status(1), …).
    let command = Cli::command();
    for sub in command.get_subcommands() {
        // clap names take &'static str; a test can afford to leak two short strings.
        let name: &'static str = Box::leak(format!("redlock-run-{}", sub.get_name()).into_boxed_str());
        let invoked: &'static str = Box::leak(format!("redlock-run {}", sub.get_name()).into_boxed_str());
        let mut page = Vec::new();
        let sub = sub.clone().name(name).display_name(name).bin_name(invoked);
        let source = concat!("redlock-run ", env!("CARGO_PKG_VERSION"));
        clap_mangen::Man::new(sub).source(source).render(&mut page).unwrap();
        let page = finish_sub_page(&String::from_utf8(page).unwrap(), name);
        stale.extend(check(&format!("man/{name}.1"), page.as_bytes()));
    }
    assert!(
        stale.is_empty(),
        "{}\nregenerate with: UPDATE_GENERATED=1 cargo test --test it generated",
        stale.join("\n")
    );
}

const README: &str = include_str!("../../README.md");

/// The committed pages carry the crate's version only: `--version` also names the commit,
/// which would make them stale at every commit.
fn for_man_page(cmd: clap::Command) -> clap::Command {
    cmd.version(env!("CARGO_PKG_VERSION"))
}

/// Text for roff: dashes and backslashes escaped, no line read as a request.
fn roff(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    if text.starts_with(['.', '\'']) { format!("\\&{text}") } else { text }
}

/// URLs are never hyphenated at a line break (`\%` before them).
fn no_url_hyphens(page: &str) -> String {
    let mut out = page.to_owned();
    for scheme in ["rediss://", "redis://", "unix://"] {
        out = out
            .replace(scheme, &format!("\\%{scheme}"))
            .replace(&format!("\\%\\%{scheme}"), &format!("\\%{scheme}"));
    }
    out
}

/// The exit-status table of README § Exit status: (status, meaning) rows.
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

/// The main page with EXIT STATUS, ENVIRONMENT, EXAMPLES and SEE ALSO sections of its own in
/// place of clap's EXTRA (the `--help` epilogue).
fn finish_main_page(page: &str) -> String {
    let extra = page.find(".SH EXTRA\n").expect("an EXTRA section");
    let version = page.find(".SH VERSION\n").expect("a VERSION section");
    let epilogue = &page[extra..version];
    let mut sections = String::new();

    sections.push_str(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in exit_statuses() {
        sections.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(&code), roff(&meaning)));
    }

    sections.push_str(".SH ENVIRONMENT\n");
    sections.push_str(&format!(
        "{}\n",
        roff("Every option but -v can be set with an environment variable; a flag on the command line wins.")
    ));
    let mut options: Vec<(String, String)> = Cli::command()
        .get_arguments()
        .filter_map(|a| Some((a.get_env()?.to_str()?.to_owned(), format!("--{}", a.get_long()?))))
        .collect();
    options.sort();
    for (var, flag) in options {
        sections.push_str(&format!(".TP\n\\fB{}\\fR\nas {}\n", roff(&var), roff(&flag)));
    }
    for (var, what) in [
        ("REDLOCK_REDIS_URL", "the Redis URL, when --redis-url is not given"),
        (
            "REDIS_URL",
            "the Redis URL, when neither --redis-url nor REDLOCK_REDIS_URL is given; passed on to the command",
        ),
        ("REDLOCK_PASSWORD", "the Redis password, so that it never sits in argv"),
    ] {
        sections.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(var), roff(what)));
    }
    sections.push_str(&format!(
        ".PP\n{}\n",
        roff("The command gets the wrapper's environment without the variables above (REDIS_URL excepted), plus:")
    ));
    for (var, what) in [
        ("REDLOCK_LOCK_KEY", "the lock key (the first, with several --key)"),
        (
            "REDLOCK_TOKEN",
            "the value stored at the key: a 128-bit random token, then host, pid and start time, \
             then the kind of lock for --shared and --limit",
        ),
        (
            "REDLOCK_FENCE",
            "the fencing token of this acquisition (the first key's); absent without a lock (--fail-open)",
        ),
        ("REDLOCK_TTL_MS", "the lease length in milliseconds"),
        ("REDLOCK_KEYS", "every key, in the order given, separated by spaces"),
        ("REDLOCK_FENCES", "every key's fence, in the same order; absent without a lock"),
    ] {
        sections.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(var), roff(what)));
    }

    sections.push_str(".SH EXAMPLES\n");
    let examples = epilogue.split("Examples:").nth(1).expect("the epilogue has examples");
    for line in examples.lines().map(str::trim).filter(|l| !l.is_empty()) {
        // Already roff text (clap escaped it).
        sections.push_str(&format!(".PP\n{line}\n"));
    }

    sections.push_str(".SH \"SEE ALSO\"\n");
    sections.push_str(
        "\\fBredlock\\-run\\-status\\fR(1), \\fBredlock\\-run\\-release\\fR(1), \\fBflock\\fR(1), \\fBtimeout\\fR(1), \\fBredis\\-server\\fR(1)\n",
    );
    no_url_hyphens(&format!("{}{}{}", &page[..extra], sections, &page[version..]))
}

/// A subcommand's page with its exit statuses and a way back to the main page.
fn finish_sub_page(page: &str, name: &str) -> String {
    let statuses: &[(&str, &str)] = match name {
        "redlock-run-status" => &[
            ("0", "the lock is held"),
            ("1", "the lock is free"),
            ("64", "usage error"),
            ("69", "Redis unavailable"),
            ("77", "Redis refused the credentials or the ACL denies a command"),
            ("78", "configuration error"),
        ],
        _ => &[
            ("0", "the lock was released"),
            ("1", "there was nothing to release"),
            ("64", "usage error (also: --force missing)"),
            ("65", "the key holds another type; it was left alone"),
            ("69", "Redis unavailable"),
            ("77", "Redis refused the credentials or the ACL denies a command"),
            ("78", "configuration error"),
        ],
    };
    let mut sections = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in statuses {
        sections.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", roff(meaning)));
    }
    sections.push_str(".SH \"SEE ALSO\"\n\\fBredlock\\-run\\fR(1)\n");
    let page = match page.find(".SH VERSION\n") {
        Some(at) => format!("{}{sections}{}", &page[..at], &page[at..]),
        None => format!("{page}{sections}"),
    };
    no_url_hyphens(&page)
}

#[test]
fn the_man_page_has_the_sections_people_look_for() {
    let mut man = Vec::new();
    clap_mangen::Man::new(for_man_page(Cli::command())).render(&mut man).unwrap();
    let page = finish_main_page(&String::from_utf8(man).unwrap());
    for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH EXAMPLES", ".SH \"SEE ALSO\""] {
        assert!(page.contains(section), "{section}");
    }
    assert!(!page.contains(".SH EXTRA"));
    assert!(!page.contains("redlock\\-run\\-help"), "no page for a help subcommand that does not exist");
    for var in ["REDLOCK_TTL", "REDLOCK_REDIS_URL", "REDLOCK_LOCK_KEY", "REDLOCK_FENCE"] {
        assert!(page.contains(&format!("\\fB{}\\fR", var.replace('-', "\\-"))), "{var}");
    }
    assert!(page.contains("\\fB125\\fR"), "the exit statuses");
    for sub in ["status", "release"] {
        let page = std::fs::read_to_string(here(&format!("man/redlock-run-{sub}.1"))).unwrap();
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
