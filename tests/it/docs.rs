//! The README and the guide stay true: every recipe's command line runs as written (the job
//! replaced by `true`, Redis by a test server), and every flag of `--help` is documented.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

const README: &str = include_str!("../../README.md");
const GUIDE: &str = include_str!("../../docs/GUIDE.md");

/// The sections whose `redlock-run …` lines run as written, and how many lines each has at
/// least, so that a recipe moved elsewhere or a heading renamed fails here.
const RECIPE_SECTIONS: [(&str, &str, &str, usize); 5] = [
    ("README.md", README, "\n## Recipes", 6),
    ("docs/GUIDE.md", GUIDE, "\n## Waiting, outages and once-per-day", 3),
    ("docs/GUIDE.md", GUIDE, "\n## Lock kinds", 3),
    ("docs/GUIDE.md", GUIDE, "\n## Several keys at once", 1),
    ("docs/GUIDE.md", GUIDE, "\n## FAQ", 4),
];

/// The `redlock-run …` command lines of those sections, one per recipe line.
fn recipe_lines() -> Vec<String> {
    RECIPE_SECTIONS
        .iter()
        .flat_map(|&(file, text, heading, at_least)| {
            let lines = section_lines(file, text, heading);
            assert!(
                lines.len() >= at_least,
                "{file} §{heading}: {at_least} recipe lines or more: {lines:#?}"
            );
            lines
        })
        .collect()
}

fn section_lines(file: &str, text: &str, heading: &str) -> Vec<String> {
    let start = text.find(heading).unwrap_or_else(|| panic!("{file} has a {heading} section"));
    let section = &text[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    section
        .lines()
        .filter_map(|line| {
            let at = line.find("redlock-run ")?;
            // Not prose: only code lines, which the docs indent by four spaces; not the
            // operator's subcommands shown with their output, nor a script's lock (run by
            // `the_script_recipe_runs_as_written`).
            let command = &line[at..];
            let script = ["redlock-run status", "redlock-run lock", "redlock-run unlock"];
            (line.starts_with("    ") && !script.iter().any(|s| command.starts_with(s)))
                .then(|| command.trim_end_matches(['"', ']']).to_owned())
        })
        .collect()
}

/// A recipe's options as a test runs them: a `--metrics-file` in the run's own directory, by
/// its name (the recipe's directory, the collector's, is not on a test host, and a run refuses
/// a metrics file it could not write).
fn here(options: &str) -> String {
    match options.split_once("--metrics-file ") {
        Some((before, rest)) => {
            let (path, after) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = path.rsplit('/').next().unwrap_or(path);
            format!("{before}--metrics-file {name} {after}").trim_end().to_owned()
        }
        None => options.to_owned(),
    }
}

#[test]
fn every_recipe_runs_as_written() {
    let redis = RedisServer::start();
    let lines = recipe_lines();
    assert!(lines.len() >= 17, "found the recipes: {lines:#?}");
    for line in &lines {
        let (options, _job) = line.split_once(" -- ").unwrap_or_else(|| panic!("a command after --: {line}"));
        // The K8s recipe quotes inside a JSON string; unescape its quotes for the shell.
        let options = here(&options.replace("\\\"", "\"").replacen("redlock-run", "\"$BIN\"", 1));
        let script = format!("{options} -- true");
        let dir = tmp();
        let r = run(
            Command::new("sh")
                .args(["-c", &script])
                .env("BIN", bin())
                .env("REDLOCK_REDIS_URL", redis.url())
                .env("ENVIRONMENT", "staging")
                .current_dir(dir.path()),
            Duration::from_secs(30),
        );
        assert_eq!(r.code, 0, "recipe `{line}` as `{script}`: {}", r.stderr);
    }
}

/// README § A lock across a script's steps, as written, its steps replaced by ones that
/// record whether the lock was held then: both were, and it was released at the end.
#[test]
fn the_script_recipe_runs_as_written() {
    let redis = RedisServer::start();
    let start = README.find("\n### A lock across a script's steps").expect("the recipe");
    let section = &README[start + 1..];
    let section = &section[..section[3..].find("\n#").map_or(section.len(), |i| i + 3)];
    let script: Vec<&str> = section.lines().filter(|l| l.starts_with("    ")).map(|l| &l[4..]).collect();
    assert!(script[0].starts_with("#!/bin/sh") && script.len() >= 5, "{script:#?}");
    let dir = tmp();
    let path = file(&dir, "run");
    let text = script
        .join("\n")
        .replace("redlock-run ", "\"$BIN\" ")
        .replace("./", "\"$BIN\" status --key lock:backup > /dev/null && echo held >> \"$LOG\" # ./");
    std::fs::write(&path, text).unwrap();
    let log = file(&dir, "log");
    let r = run(
        Command::new("setsid")
            .arg("-w")
            .arg("sh")
            .arg(&path)
            .env("BIN", bin())
            .env("LOG", &log)
            .env("REDLOCK_REDIS_URL", redis.url()),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "held\nheld\n");
    assert!(!redis.exists(b"lock:backup"));
    assert!(section.contains("setsid -w /opt/backup/run"), "the cron form is given");
}

/// The cron recipe's promise: on every host that loses (the lock is busy, or the day's run
/// already succeeded), `-q --busy-exit-code 0` exits 0 and prints nothing, so cron mails nothing.
#[test]
fn the_cron_recipes_losers_print_nothing() {
    let redis = RedisServer::start();
    let lines: Vec<String> =
        recipe_lines().into_iter().filter(|l| l.contains("-q --busy-exit-code 0")).collect();
    assert!(lines.len() >= 4, "found the cron recipes: {lines:#?}");
    let run_line = |line: &str| {
        let (options, _job) = line.split_once(" -- ").expect("a command after --");
        let dir = tmp();
        let script = format!("{} -- true", here(&options.replacen("redlock-run", "\"$BIN\"", 1)));
        run(
            Command::new("sh")
                .args(["-c", &script])
                .env("BIN", bin())
                .env("REDLOCK_REDIS_URL", redis.url())
                .current_dir(dir.path()),
            Duration::from_secs(30),
        )
    };
    for line in &lines {
        let key = line.split("--key ").nth(1).and_then(|k| k.split(' ').next()).expect("a --key").to_owned();
        let r = if line.contains("--idempotency-key") {
            // The day's run succeeded on another host: this one skips it.
            assert_eq!(run_line(line).code, 0);
            run_line(line)
        } else {
            // Another host holds the lock.
            redis.cmd::<()>(&[b"SET", key.as_bytes(), b"other-host", b"PX", b"60000"]);
            run_line(line)
        };
        assert_eq!(r.code, 0, "{line}: {}", r.stderr);
        assert_eq!(r.stderr, "", "{line}: the losing host printed something");
    }
}

/// Long flags as clap prints them in `--help`.
fn help_flags() -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for args in [
        &["--help"][..],
        &["status", "--help"],
        &["release", "--help"],
        &["lock", "--help"],
        &["unlock", "--help"],
    ] {
        let out = Command::new(bin()).args(args).output().unwrap();
        assert!(out.status.success());
        for word in
            String::from_utf8_lossy(&out.stdout).split(|c: char| c.is_whitespace() || c == ',' || c == '[')
        {
            if let Some(flag) = word.trim_end_matches('.').strip_prefix("--")
                && !flag.is_empty()
                && flag.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            {
                flags.insert(format!("--{flag}"));
            }
        }
    }
    flags
}

/// Every flag is explained where a user reads: in the README or the guide, and in the man pages.
#[test]
fn every_flag_in_help_is_in_the_docs_and_the_man_page() {
    let man: String = [
        "redlock-run",
        "redlock-run-status",
        "redlock-run-release",
        "redlock-run-lock",
        "redlock-run-unlock",
    ]
    .iter()
    .map(|page| std::fs::read_to_string(format!("{}/man/{page}.1", env!("CARGO_MANIFEST_DIR"))).unwrap())
    .collect();
    let flags = help_flags();
    assert!(flags.len() >= 30 && flags.contains("--verbose"), "{flags:?}");
    for flag in &flags {
        if flag == "--help" || flag == "--version" {
            continue;
        }
        assert!(
            README.contains(flag.as_str()) || GUIDE.contains(flag.as_str()),
            "{flag} is missing from README.md and docs/GUIDE.md"
        );
        // roff escapes dashes as \-.
        assert!(man.contains(&flag.replace('-', "\\-")), "{flag} is missing from the man page");
    }
}

/// The guide's list of environment variables is complete: every variable `--help` shows is in it.
#[test]
fn every_environment_variable_in_help_is_in_the_guides_list() {
    let start = GUIDE.find("can also be set with an environment variable").expect("the list");
    let list = &GUIDE[start..start + 2000];
    let out = Command::new(bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let vars: BTreeSet<&str> =
        help.split("[env: ").skip(1).filter_map(|rest| rest.split(['=', ']', ',']).next()).collect();
    assert!(vars.len() >= 25 && vars.contains("REDLOCK_NO_NEW_PRIVS"), "{vars:?}");
    for var in vars {
        assert!(list.contains(&format!("`{var}`")), "{var} is missing from docs/GUIDE.md's list");
    }
}
