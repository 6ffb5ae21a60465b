//! Parsing the command line: `help` and a mistyped subcommand's suggestion before clap parses,
//! what clap cannot tell (a value from a variable, a subcommand given late), and clap's errors
//! in the tool's own words.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches};

use super::{Cli, Deferred, SubcommandArg};

/// Why the command line ends without a run: help or the version asked for, or a usage error.
pub struct Stop(clap::Error);

impl Stop {
    /// Help or the version was asked for (`-h`, `--help`, `help`, `--version`).
    pub fn is_help(&self) -> bool {
        !self.0.use_stderr()
    }

    /// The help or version text, plain.
    pub fn text(&self) -> String {
        self.0.render().to_string()
    }

    /// The usage error, as the wrapper says it (`redlock-run: error: …`).
    pub fn usage_error(&self) -> String {
        usage_error(&self.0)
    }
}

impl Cli {
    /// Parses the command line. `-h` is the summary, one line per option: without the
    /// environment variables, defaults and values that `--help` lists (clap shows those in both).
    pub fn from_args() -> Result<Cli, Stop> {
        Cli::parse_args().map_err(Stop)
    }

    fn parse_args() -> Result<Cli, clap::Error> {
        let mut args: Vec<OsString> = crate::sys::args_os().collect();
        let mut cmd = Cli::command();
        if let Some(first) = args.get(1).and_then(|a| a.to_str()) {
            if first == "help" {
                args = help_args(&args, &cmd)?;
            } else if let Some(meant) = mistyped_subcommand(first) {
                return Err(did_you_mean(first, meant, &mut cmd));
            }
        }
        if asks_for_summary(&args) {
            // Defines the subcommands' options (see [`Deferred`]), so that they are summed up too.
            cmd.build();
            cmd = summary(cmd);
        }
        let mut matches = match cmd.try_get_matches_from_mut(args.clone()) {
            // `--generate` is exclusive of every other option, and clap counts a variable as
            // given: printing docs reads no configuration, so a wrapper's variables are dropped.
            Err(e) if e.kind() == clap::error::ErrorKind::ArgumentConflict && asks_for_docs(&args) => {
                cmd = cmd.mut_args(|a| a.env(None));
                cmd.try_get_matches_from_mut(args.clone())?
            }
            parsed => parsed?,
        };
        let kind_from_env = |m: &clap::ArgMatches| {
            let from_env = |id: &str| m.value_source(id) == Some(clap::parser::ValueSource::EnvVariable);
            (from_env("limit"), from_env("shared"))
        };
        let top = kind_from_env(&matches);
        let sub = matches.subcommand_matches("lock").map(kind_from_env);
        let mut cli = Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cmd))?;
        if cli.action.is_none()
            && let Some(sub @ ("lock" | "unlock")) = first_operand(&cmd, &args).and_then(|w| w.to_str())
        {
            // As a command to run it would run a program of that name, and a script's
            // `eval "$(…)"` would go on without the lock if there is none.
            return Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidSubcommand,
                format!(
                    "subcommands come first, then their options: redlock-run {sub} --key KEY [OPTIONS] \
                     (to run a program called {sub}, put it after --)\n"
                ),
            )
            .with_cmd(&cmd));
        }
        cli.run.kind_from_env = top;
        if let (Some(SubcommandArg::Lock(Deferred(lock))), Some(sub)) = (&mut cli.action, sub) {
            lock.run.kind_from_env = sub;
        }
        Ok(cli)
    }
}

/// The variable behind clap's "invalid UTF-8" error: one set to bytes that are not UTF-8, for an
/// option that takes text (keys and paths take any bytes).
pub fn non_utf8_variable() -> Option<String> {
    let takes_bytes = |a: &clap::Arg| {
        let id = a.get_value_parser().type_id();
        id == std::any::TypeId::of::<OsString>() || id == std::any::TypeId::of::<PathBuf>()
    };
    let mut cmd = Cli::command();
    cmd.build(); // the subcommands' options too (see [`Deferred`])
    let args = cmd.get_arguments().chain(cmd.get_subcommands().flat_map(|s| s.get_arguments()));
    args.filter(|a| !takes_bytes(a))
        .filter_map(|a| a.get_env())
        .find(|var| std::env::var_os(var).is_some_and(|v| v.to_str().is_none()))
        .map(|var| var.to_string_lossy().into_owned())
}

/// The environment variable a rejected value came from: that of the option `flag` (`--ttl`, as
/// clap's error names it) when the option is not on the command line.
pub fn value_from_variable(flag: &str) -> Option<String> {
    let long = flag.split([' ', '=']).next()?.strip_prefix("--")?;
    let mut cmd = Cli::command();
    cmd.build(); // the subcommands' options too (see [`Deferred`])
    let mut args = cmd.get_arguments().chain(cmd.get_subcommands().flat_map(|s| s.get_arguments()));
    let arg = args.find(|a| a.get_long() == Some(long))?;
    let var = arg.get_env()?.to_str()?.to_owned();
    let given = crate::sys::args_os().skip(1).take_while(|a| a != "--").any(|a| {
        let a = a.to_string_lossy();
        a == format!("--{long}")
            || a.starts_with(&format!("--{long}="))
            || arg.get_short().is_some_and(|c| !a.starts_with("--") && a.starts_with('-') && a.contains(c))
    });
    (!given && std::env::var_os(&var).is_some()).then_some(var)
}

/// The first word of `args` (argv, the program first) that is neither an option nor an
/// option's value, before any `--`: a subcommand, or the command to run.
fn first_operand<'a>(cmd: &clap::Command, args: &'a [OsString]) -> Option<&'a std::ffi::OsStr> {
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    let long_takes = |name: &str| cmd.get_arguments().any(|a| a.get_long() == Some(name) && takes_value(a));
    let short_takes = |c: char| cmd.get_arguments().any(|a| a.get_short() == Some(c) && takes_value(a));
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        let text = word.to_string_lossy();
        if text == "--" {
            return None;
        }
        if let Some(long) = text.strip_prefix("--") {
            if !long.contains('=') && long_takes(long) {
                words.next();
            }
        } else if let Some(shorts) = text.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-vk KEY`: the first short that takes a value takes the rest, or the next word.
            if let Some(at) = shorts.chars().position(short_takes)
                && at + 1 == shorts.chars().count()
            {
                words.next();
            }
        } else {
            return Some(word);
        }
    }
    None
}

/// Whether the command line asks for `lock`, even mistyped or placed after options: its
/// failure must then end the script that evaluates its output (see `script::print_failing`).
pub fn means_lock() -> bool {
    let args: Vec<OsString> = crate::sys::args_os().collect();
    let first = args.get(1).and_then(|a| a.to_str());
    // The definition is built (`first_operand`) only when the word is there at all: this runs
    // as every failing run exits.
    let lock_among_options = args.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "lock");
    first == Some("lock")
        || first.and_then(mistyped_subcommand) == Some("lock")
        || (lock_among_options && first_operand(&Cli::command(), &args).is_some_and(|w| w == "lock"))
}

/// The words a first argument may be meant as: the subcommands, and `help`.
const SUBCOMMAND_WORDS: [&str; 5] = ["status", "release", "lock", "unlock", "help"];

/// Whether the command line starts with a subcommand (or `help`), before it is parsed.
pub fn starts_with_subcommand() -> bool {
    crate::sys::args_os().nth(1).is_some_and(|first| SUBCOMMAND_WORDS.iter().any(|w| first == *w))
}

/// `help`, `help status`, `help release`, as `--help` at their level (clap's own help
/// subcommand would also get a man page and completions of its own).
fn help_args(args: &[OsString], cmd: &clap::Command) -> Result<Vec<OsString>, clap::Error> {
    let mut help = vec![args[0].clone()];
    match args.get(2).and_then(|a| a.to_str()) {
        None | Some("help") => {}
        Some(flag) if flag.starts_with('-') => {}
        Some(sub @ ("status" | "release" | "lock" | "unlock")) => help.push(sub.into()),
        Some(other) => {
            let meant = mistyped_subcommand(other).filter(|m| *m != "help");
            let mut cmd = cmd.clone();
            return Err(match meant {
                Some(meant) => did_you_mean(other, meant, &mut cmd),
                None => clap::Error::raw(
                    clap::error::ErrorKind::InvalidSubcommand,
                    format!("there is no subcommand `{other}`: the subcommands are status, release, lock and unlock\n"),
                )
                .with_cmd(&cmd),
            });
        }
    }
    help.push("--help".into());
    Ok(help)
}

/// The subcommand a first word one edit away from one (Damerau: a letter added, dropped,
/// changed, or two swapped; any case) was meant as — unless a program of that name is on
/// PATH, which runs as before.
fn mistyped_subcommand(word: &str) -> Option<&'static str> {
    let lower: Vec<char> = word.to_ascii_lowercase().chars().collect();
    let meant = SUBCOMMAND_WORDS.into_iter().find(|&sub| {
        let sub_chars: Vec<char> = sub.chars().collect();
        word != sub && within_one_edit(&lower, &sub_chars)
    })?;
    (!word.contains('/') && !crate::sys::found_on_path(word.as_ref())).then_some(meant)
}

/// Whether `a` becomes `b` with at most one edit: a character added, dropped or changed, or
/// two neighbours swapped.
fn within_one_edit(a: &[char], b: &[char]) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    match long.len() - short.len() {
        0 => {
            let differ: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
            match differ[..] {
                [] | [_] => true,
                [i, j] => j == i + 1 && a[i] == b[j] && a[j] == b[i],
                _ => false,
            }
        }
        1 => {
            let same = short.iter().zip(long).take_while(|(x, y)| x == y).count();
            short[same..] == long[same + 1..]
        }
        _ => false,
    }
}

fn did_you_mean(word: &str, meant: &str, cmd: &mut clap::Command) -> clap::Error {
    clap::Error::raw(
        clap::error::ErrorKind::InvalidSubcommand,
        format!(
            "`{word}` is neither a subcommand nor a program on PATH: did you mean `{meant}`? (a command \
             to run goes after the options: redlock-run --key KEY -- COMMAND)\n"
        ),
    )
    .with_cmd(cmd)
}

/// Whether the wrapper's own arguments (those before `--`) include `--generate`.
fn asks_for_docs(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--generate" || a.to_string_lossy().starts_with("--generate="))
}

/// Whether the wrapper's own arguments (those before `--`) include `-h`, alone or among other
/// short flags (`-vh`). Wrong guesses cost nothing: hiding details changes only help text.
fn asks_for_summary(args: &[OsString]) -> bool {
    args.iter().skip(1).take_while(|a| *a != "--").any(|a| {
        let a = a.to_string_lossy();
        a.strip_prefix('-')
            .is_some_and(|flags| flags.contains('h') && flags.chars().all(|c| "hvqV".contains(c)))
    })
}

fn summary(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let takes_value = a.get_action().takes_values();
        let a = a.hide_env(true);
        if takes_value { a.hide_default_value(true).hide_possible_values(true) } else { a }
    })
    .mut_subcommands(summary)
}

/// The option a negative value was given to (`--ttl -5s`: clap sees `-5s` as flags `-5`, `-s`
/// and reports `-5`): the word before the first of the wrapper's own arguments that starts
/// with `arg`, and that argument.
fn option_before(arg: &str) -> Option<(String, String)> {
    let args: Vec<String> = own_arguments();
    let at = args.iter().position(|a| a.starts_with(arg))?;
    let option = args.get(at.checked_sub(1)?)?;
    option.starts_with('-').then(|| (option.clone(), args[at].clone()))
}

/// The wrapper's own arguments (those before `--`), as text.
fn own_arguments() -> Vec<String> {
    crate::sys::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .take_while(|a| a != "--")
        .collect()
}

/// `status` or `release` among the wrapper's own arguments, but not first: the user meant the
/// subcommand and put an option before it, which makes it the command to run instead.
fn late_subcommand() -> Option<String> {
    let args: Vec<String> = own_arguments();
    args.iter().skip(1).find(|a| matches!(a.as_str(), "status" | "release" | "lock" | "unlock")).cloned()
}

/// clap's error in the tool's own style (`redlock-run: error: …`). Its tip "to pass '-x' as a
/// value, use '-- -x'" is wrong for a wrapper, where whatever follows `--` is the command: it is
/// replaced by one that fits.
fn usage_error(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() == ErrorKind::InvalidUtf8
        && let Some(var) = non_utf8_variable()
    {
        return format!("redlock-run: error: {var} is not valid UTF-8\n");
    }
    let rendered = e.render().to_string();
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.as_str(),
        _ => "",
    };
    let from_variable = match e.kind() {
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => value_from_variable(arg),
        _ => None,
    };
    let mut tip = if let Some(var) = &from_variable {
        Some(format!("the value comes from the environment: {var}"))
    } else if matches!(arg, "-n" | "-E") || arg.starts_with("-E") {
        Some(format!(
            "-n and -E are flock(1) flags: redlock-run fails at once when the lock is busy (--wait 0 \
             is the default) and then exits with --busy-exit-code N ({} by default)",
            crate::exit::status::BUSY
        ))
    } else if arg.strip_prefix('-').is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit())) {
        Some(match option_before(arg) {
            Some((option, value)) => format!("{option} {value}: durations and numbers cannot be negative"),
            None => "durations and numbers cannot be negative".to_owned(),
        })
    } else if e.kind() == ErrorKind::UnknownArgument && arg.starts_with('-') {
        Some("to give an option a value that starts with '-', write --option=VALUE".to_owned())
    } else if e.kind() == ErrorKind::MissingRequiredArgument {
        late_subcommand().map(|sub| {
            format!(
                "subcommands come first, then their options: redlock-run {sub} --key KEY [OPTIONS] \
                 (to run a command called {sub}, put it after --)"
            )
        })
    } else {
        None
    };
    let mut out = String::new();
    let mut lines = rendered.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("tip: to pass '") {
            // Its blank line goes with it.
            lines.next_if(|l| l.trim().is_empty());
            continue;
        }
        if out.is_empty() {
            out.push_str("redlock-run: ");
            out.push_str(line);
            out.push('\n');
            // After the first line, or after the list it announces ("…not provided:").
            if !line.ends_with(':')
                && let Some(tip) = tip.take()
            {
                out.push_str(&format!("\n  tip: {tip}\n"));
            }
            continue;
        }
        if (line.trim().is_empty() || line.starts_with("Usage:"))
            && let Some(tip) = tip.take()
        {
            out.push_str(&format!("\n  tip: {tip}\n"));
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::within_one_edit;

    #[test]
    fn one_edit_is_a_letter_added_dropped_changed_or_two_neighbours_swapped() {
        let one = |a: &str, b: &str| {
            let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
            within_one_edit(&a, &b) && within_one_edit(&b, &a)
        };
        for near in [
            "status", "sttaus", "statu", "sstatus", "statsu", "tsatus", "stotus", "statuss", "xstatus",
            "státus",
        ] {
            assert!(one(near, "status"), "{near}");
        }
        for far in ["stat", "satuts", "statuses", "sutats", "", "release"] {
            assert!(!one(far, "status"), "{far}");
        }
        assert!(one("", "h") && !one("", "he"));
    }
}
