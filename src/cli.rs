//! The command line, as clap sees it. Help text lives here; validation lives in `config/`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

/// The epilogue of `-h`: where the rest is.
const AFTER_SHORT_HELP: &str = "\
Durations: 5 or 1.5 (seconds), 500ms, 30m, '1h 30m'. '--help' adds the details,
the environment variables, the exit statuses and examples; so does
'man redlock-run'.";

/// The epilogue of `--help` (and of the man page, which reads its examples from here).
const AFTER_HELP: &str = "\
Durations use humantime syntax (500ms, 30s, 30m, '1h 30m'), or are a bare number of seconds
(5, 1.5), as for sleep(1).
Every option but -v, --generate and --allow-interactive can also be set with an environment variable
REDLOCK_<NAME> (shown in brackets); a flag on the command line wins over the environment.

Exit status: the command's own status (128+N if it died of signal N); 64 usage error;
65 the key holds another type, or is used with another kind of lock (--limit, --shared);
69 Redis unavailable; 70 internal error; 75 lock busy; 77 Redis refused the credentials or
the ACL denies a command; 78 configuration error (malformed Redis URL, ulimit -n below 64);
124 stopped by --max-runtime; 125 lease lost, command stopped; 126 command could not be
started (not executable, or the process limit); 127 command not found.

Examples:
  redlock-run --key lock:settlement:daily --ttl 30m -- ./settle.sh
  redlock-run -k lock:deploy -t 5m --wait 20m --redis-url redis://redis.internal:6379 -- make deploy
  redlock-run --key lock:backup --limit 2 --wait 1h -- /opt/backup/run
  redlock-run --key lock:env:staging --shared --wait 30m -- ./run-tests.sh
  redlock-run --key lock:db:orders --key lock:cache:orders --wait 30m -- ./migrate.sh
  redlock-run status --key lock:settlement:daily
  redlock-run release --key lock:settlement:daily --force
  eval \"$(redlock-run lock --key lock:backup --ttl 1m)\" || exit   (in a script: the rest of it)";

/// `--version`: the crate's version, the commit it was built from (when built from a git
/// checkout) and the TLS backend.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("REDLOCK_RUN_BUILD"));

/// Run a command while holding a lock in Redis, so that it runs on one machine at a time.
///
/// The lock is taken with `SET key value NX PX ttl`, renewed while the command runs, and
/// released (compare-and-delete) when it ends. The command is run directly (no shell), in its
/// own process group, with REDLOCK_LOCK_KEY, REDLOCK_TOKEN, REDLOCK_FENCE and REDLOCK_TTL_MS in its
/// environment (and REDLOCK_KEYS and REDLOCK_FENCES, for one key or several).
#[derive(Debug, Parser)]
#[command(
    name = "redlock-run",
    version = VERSION,
    about = "Run a command under a Redis lock: one machine at a time, across a fleet",
    after_help = AFTER_SHORT_HELP,
    after_long_help = AFTER_HELP,
    max_term_width = 100,
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub action: Option<Action>,

    #[command(flatten)]
    pub run: RunArgs,

    /// Print a man page or a completion script, and exit
    ///
    /// The docs of this very binary, for a copied one: 'redlock-run --generate man >
    /// /usr/local/share/man/man1/redlock-run.1', 'redlock-run --generate bash >
    /// /usr/share/bash-completion/completions/redlock-run'. No environment variable: a run never
    /// turns into this.
    #[arg(long, value_name = "KIND", value_enum, exclusive = true, help_heading = "Output")]
    pub generate: Option<Generate>,

    /// The command to run and its arguments
    #[arg(value_name = "COMMAND", required = true, trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// The options of a run, shared by `lock` (a run whose "command" is the rest of a script).
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub key: KeyArg,

    /// Lease length: how long the lock lives unrenewed
    ///
    /// The lock is renewed every --renew-every while the command runs; if the wrapper dies, its
    /// guardian releases the lock once the command's processes are dead, and failing that the
    /// lock expires this long after its last renewal.
    #[arg(
        short,
        long,
        env = "REDLOCK_TTL",
        value_name = "DUR",
        allow_negative_numbers = true,
        default_value = "30s",
        help_heading = "Lock"
    )]
    pub ttl: String,

    /// Exit status when the lock is busy (like flock -E)
    ///
    /// The status when someone else holds the lock (after --wait, if given).
    #[arg(
        long,
        env = "REDLOCK_BUSY_EXIT_CODE",
        value_name = "N",
        allow_negative_numbers = true,
        default_value_t = crate::exit::status::BUSY,
        help_heading = "Lock",
    )]
    pub busy_exit_code: u8,

    /// Admit up to N holders at once (a semaphore)
    ///
    /// At most N runs hold the key together, each with its own lease and fence; the others are
    /// busy, or queue with --wait. Every run on the key must give the same N. --limit 1 is the
    /// exclusive lock, the default.
    #[arg(
        long,
        env = "REDLOCK_LIMIT",
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = "Lock"
    )]
    pub limit: Option<u32>,

    /// Hold the lock shared: beside other shared runs
    ///
    /// Shared runs hold the key together; a run without --shared is exclusive and holds it
    /// alone. A queued exclusive run is not passed: shared runs that come after it wait for it.
    #[arg(
        long,
        env = "REDLOCK_SHARED",
        value_parser = switch("REDLOCK_SHARED"),
        help_heading = "Lock",
    )]
    pub shared: bool,

    /// Which of `--limit` and `--shared` came from the environment (`REDLOCK_LIMIT`,
    /// `REDLOCK_SHARED`) rather than the command line, which wins when they conflict.
    #[arg(skip)]
    pub kind_from_env: (bool, bool),

    /// Hold the lock at least this long
    ///
    /// Counted from the acquisition, even if the command ends sooner (for cron hosts whose clocks
    /// disagree); the wrapper does not wait for it: the lock is left to expire then.
    #[arg(
        long,
        env = "REDLOCK_MIN_HOLD",
        value_name = "DUR",
        allow_negative_numbers = true,
        help_heading = "Lock"
    )]
    pub min_hold: Option<String>,

    /// Succeed at most once per ID
    ///
    /// Skip (exit 0) if a run with this ID already succeeded; record success after exit 0.
    #[arg(long, env = "REDLOCK_IDEMPOTENCY_KEY", value_name = "ID", help_heading = "Lock")]
    pub idempotency_key: Option<OsString>,

    /// How long a success record is kept
    ///
    /// Applies to the records --idempotency-key writes.
    #[arg(
        long,
        env = "REDLOCK_IDEMPOTENCY_TTL",
        value_name = "DUR",
        allow_negative_numbers = true,
        default_value = "7d",
        help_heading = "Lock"
    )]
    pub idempotency_ttl: String,

    /// How long to wait for a busy lock; 0 = fail at once
    ///
    /// 'forever' waits without a limit, as flock(1) does without -w, and so does an outage of
    /// Redis at the start (then --fail-open cannot be used); a signal still ends the wait.
    #[arg(
        short,
        long,
        env = "REDLOCK_WAIT",
        value_name = "DUR",
        allow_negative_numbers = true,
        default_value = "0",
        help_heading = "Waiting"
    )]
    pub wait: String,

    /// Run without a lock if Redis is unreachable
    ///
    /// If Redis cannot be reached at start, run the command anyway, without a lock (loud
    /// warning). Never when Redis answered (out of memory, read-only, loading) or on a
    /// configuration mistake.
    #[arg(
        long,
        env = "REDLOCK_FAIL_OPEN",
        value_parser = switch("REDLOCK_FAIL_OPEN"),
        help_heading = "Waiting",
    )]
    pub fail_open: bool,

    /// Renewal period [default: ttl/3]
    ///
    /// The lease is renewed this often while the command runs; --ttl must leave room for one
    /// renewal, the stop path and clock drift.
    #[arg(
        long,
        env = "REDLOCK_RENEW_EVERY",
        value_name = "DUR",
        allow_negative_numbers = true,
        help_heading = "Command supervision"
    )]
    pub renew_every: Option<String>,

    /// Time between SIGTERM and SIGKILL
    ///
    /// When the command must stop (lost lock, --max-runtime, a signal to the wrapper), its
    /// process group gets SIGTERM, then SIGKILL this long after [default: min(10s, ttl/6)].
    #[arg(
        long,
        env = "REDLOCK_KILL_GRACE",
        value_name = "DUR",
        allow_negative_numbers = true,
        help_heading = "Command supervision"
    )]
    pub kill_grace: Option<String>,

    /// What to do when the lock is lost
    ///
    /// The lock is lost when the key holds another value, or when ownership cannot be
    /// confirmed before the lease runs out.
    #[arg(
        long,
        env = "REDLOCK_ON_LOST",
        value_name = "ACTION",
        value_enum,
        default_value_t = OnLostArg::Terminate,
        help_heading = "Command supervision",
    )]
    pub on_lost: OnLostArg,

    /// Stop the command after this long (exit 124)
    ///
    /// Like timeout(1): the command gets SIGTERM (SIGKILL after --kill-grace) and the run exits
    /// 124.
    #[arg(
        long,
        env = "REDLOCK_MAX_RUNTIME",
        value_name = "DUR",
        allow_negative_numbers = true,
        help_heading = "Command supervision"
    )]
    pub max_runtime: Option<String>,

    /// Keep the command from gaining privileges
    ///
    /// Sets no_new_privs, so that sudo and setuid programs cannot make the command another
    /// user's process, which the wrapper could no longer stop.
    #[arg(
        long,
        env = "REDLOCK_NO_NEW_PRIVS",
        value_parser = switch("REDLOCK_NO_NEW_PRIVS"),
        help_heading = "Command supervision",
    )]
    pub no_new_privs: bool,

    #[command(flatten)]
    pub redis: RedisArgs,

    /// Write Prometheus metrics to PATH at exit
    ///
    /// Text format, written atomically, for the node_exporter textfile collector.
    #[arg(long, env = "REDLOCK_METRICS_FILE", value_name = "PATH", help_heading = "Output")]
    pub metrics_file: Option<PathBuf>,

    #[command(flatten)]
    pub output: OutputArgs,
}

impl Cli {
    /// Parses the command line. `-h` is the summary, one line per option: without the
    /// environment variables, defaults and values that `--help` lists (clap shows those in both).
    pub fn from_args() -> Result<Cli, clap::Error> {
        let mut args: Vec<OsString> = std::env::args_os().collect();
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
            && let Some(sub @ ("lock" | "unlock")) = first_operand(&args).and_then(|w| w.to_str())
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
        if let (Some(Action::Lock(Deferred(lock))), Some(sub)) = (&mut cli.action, sub) {
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
    let given = std::env::args_os().skip(1).take_while(|a| a != "--").any(|a| {
        let a = a.to_string_lossy();
        a == format!("--{long}")
            || a.starts_with(&format!("--{long}="))
            || arg.get_short().is_some_and(|c| !a.starts_with("--") && a.starts_with('-') && a.contains(c))
    });
    (!given && std::env::var_os(&var).is_some()).then_some(var)
}

/// The first word of `args` (argv, the program first) that is neither an option nor an
/// option's value, before any `--`: a subcommand, or the command to run.
fn first_operand(args: &[OsString]) -> Option<&std::ffi::OsStr> {
    let cmd = Cli::command();
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
    let args: Vec<OsString> = std::env::args_os().collect();
    let first = args.get(1).and_then(|a| a.to_str());
    // The definition is built (`first_operand`) only when the word is there at all: this runs
    // as every failing run exits.
    let lock_among_options = args.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "lock");
    first == Some("lock")
        || first.and_then(mistyped_subcommand) == Some("lock")
        || (lock_among_options && first_operand(&args).is_some_and(|w| w == "lock"))
}

/// The words a first argument may be meant as: the subcommands, and `help`.
const SUBCOMMAND_WORDS: [&str; 5] = ["status", "release", "lock", "unlock", "help"];

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

/// `--on-lost` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnLostArg {
    /// Stop the command (SIGTERM, then SIGKILL) before the lock can expire under it; exit 125
    Terminate,
    /// Keep the command running without the lock, warn loudly, exit with the command's status
    Ignore,
}

/// Operator subcommands. (A command literally named like one of them runs after `--`.)
#[derive(Debug, Subcommand)]
pub enum Action {
    /// Show who holds the lock; exit 0 when held, 1 when free
    ///
    /// Also since when, the TTL left, the fence and the idempotency records.
    Status(Deferred<StatusArgs>),
    /// Delete a stuck lock (operator override)
    ///
    /// Deletes the lock whatever its value, and wakes the runs waiting for it.
    Release(Deferred<ReleaseArgs>),
    /// Hold the lock for the rest of a shell script
    ///
    /// In a script: eval "$(redlock-run lock --key KEY)" || exit. Takes the lock as a run
    /// would, prints shell assignments (REDLOCK_LOCK_KEY, REDLOCK_TOKEN, REDLOCK_FENCE,
    /// REDLOCK_HOLDER, ...) and leaves a holder in the background that renews the lease while
    /// the script lives, stops the script's process group as a run stops its command (lost lock,
    /// --max-runtime, a signal to the holder) and releases the lock within 100 ms of the
    /// script's exit. On failure it prints only `(exit N)`, so that eval fails with a run's
    /// status. The script must lead its process group (setsid -w ./script). A run's options
    /// apply, but --idempotency-key, --metrics-file, --no-new-privs and --busy-exit-code 0.
    Lock(Deferred<Box<LockArgs>>),
    /// Release the lock taken by `lock` in this script
    ///
    /// Finds the holder through REDLOCK_HOLDER; exits 0 once the lock is released, 125 when it
    /// was lost (or its holder is gone), 64 when this script holds no lock, 77 when the holder
    /// is another user's.
    Unlock(Deferred<UnlockArgs>),
}

#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub run: RunArgs,

    /// Allow a lock held by an interactive shell
    ///
    /// A lost lock then stops the shell's process group: SIGTERM, which an interactive shell
    /// ignores, then SIGKILL, which ends the terminal session. No environment variable.
    #[arg(long, help_heading = "Command supervision")]
    pub allow_interactive: bool,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

/// A subcommand's options, defined only when clap needs them: when the subcommand is used, or
/// its help, man page or completions are made. A run, which uses neither subcommand, does not
/// build their options (more than half of all the options, with their environment variables).
#[derive(Debug)]
pub struct Deferred<T>(pub T);

impl<T: Args> Args for Deferred<T> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.defer(|cmd| keeping_about(cmd, T::augment_args))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd.defer(|cmd| keeping_about(cmd, T::augment_args_for_update))
    }
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
}

/// Adds a subcommand's options after its description was set (from the doc comment of its
/// variant in [`Action`]), which the doc comments of the option groups would otherwise replace.
fn keeping_about(cmd: clap::Command, augment: fn(clap::Command) -> clap::Command) -> clap::Command {
    let (about, long_about) = (cmd.get_about().cloned(), cmd.get_long_about().cloned());
    let cmd = augment(cmd);
    let cmd = match about {
        Some(about) => cmd.about(about),
        None => cmd.about(None::<&str>),
    };
    match long_about {
        Some(long_about) => cmd.long_about(long_about),
        None => cmd.long_about(None::<&str>),
    }
}

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Deferred)
    }
    fn from_arg_matches_mut(matches: &mut clap::ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(matches).map(Deferred)
    }
    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }
    fn update_from_arg_matches_mut(&mut self, matches: &mut clap::ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub key: KeyArg,

    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub redis: RedisArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pub key: KeyArg,

    /// Required: a forced release can let two runs overlap
    ///
    /// A forced release deletes the lock whatever its value: if its holder still runs,
    /// another run can start beside it.
    #[arg(long)]
    pub force: bool,

    /// Drop only the holder whose token starts with this
    ///
    /// For --shared and --limit locks, which have several holders: drop the one whose token
    /// starts with PREFIX (as `status` shows it) and leave the others. Without it, every holder
    /// is dropped. An exclusive lock is released only if its holder's token matches.
    #[arg(long, value_name = "PREFIX")]
    pub holder: Option<String>,

    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub redis: RedisArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--key`, the same for a run and for `status` and `release`.
#[derive(Debug, Args)]
pub struct KeyArg {
    /// Lock key; repeat to hold several, all or none
    ///
    /// Used verbatim: any bytes the shell can pass, up to 64 KiB. Given several times, the run holds every key
    /// or none, taken together (no order to get wrong, nothing to deadlock); the first key is
    /// the one REDLOCK_LOCK_KEY, REDLOCK_FENCE and --idempotency-key are about.
    // Required; a subcommand lifts the requirement at the top level (`subcommand_negates_reqs`)
    // and has its own.
    #[arg(
        id = "key",
        short = 'k',
        long = "key",
        env = "REDLOCK_KEY",
        value_name = "KEY",
        required = true,
        action = ArgAction::Append,
        help_heading = "Lock"
    )]
    pub value: Vec<OsString>,
}

/// Where Redis is, how to reach it safely, and how long to wait for it.
#[derive(Debug, Args)]
pub struct RedisArgs {
    /// Redis URL (redis://, rediss://, unix://)
    ///
    /// rediss:// is TLS. Give it several times for a Redlock quorum of independent servers, or for a Cluster's
    /// seed nodes with --cluster [env: REDLOCK_REDIS_URL, then REDIS_URL] [default:
    /// redis://127.0.0.1:6379].
    #[arg(long, value_name = "URL", action = ArgAction::Append, help_heading = "Redis connection")]
    pub redis_url: Vec<String>,

    /// Read the Redis password from this file
    ///
    /// Its first line, so that the password never sits in argv [the password can also come
    /// from the URL or REDLOCK_PASSWORD].
    #[arg(long, env = "REDLOCK_PASSWORD_FILE", value_name = "PATH", help_heading = "Redis connection")]
    pub password_file: Option<PathBuf>,

    /// CA certificates (PEM) to verify with
    ///
    /// The server's certificate, and a rediss:// Sentinel's, instead of with the system's
    /// certificates.
    #[arg(long, env = "REDLOCK_TLS_CA_FILE", value_name = "PATH", help_heading = "Redis connection")]
    pub tls_ca_file: Option<PathBuf>,

    /// Client certificate (PEM) for mutual TLS
    ///
    /// Needs --tls-key-file.
    #[arg(
        long,
        env = "REDLOCK_TLS_CERT_FILE",
        value_name = "PATH",
        requires = "tls_key_file",
        help_heading = "Redis connection"
    )]
    pub tls_cert_file: Option<PathBuf>,

    /// Client private key (PEM) for mutual TLS
    ///
    /// Needs --tls-cert-file.
    #[arg(
        long,
        env = "REDLOCK_TLS_KEY_FILE",
        value_name = "PATH",
        requires = "tls_cert_file",
        help_heading = "Redis connection"
    )]
    pub tls_key_file: Option<PathBuf>,

    /// Do not verify the server's certificate
    ///
    /// Nor its host name; a warning says so on every run.
    #[arg(
        long,
        env = "REDLOCK_TLS_INSECURE",
        value_parser = switch("REDLOCK_TLS_INSECURE"),
        help_heading = "Redis connection",
    )]
    pub tls_insecure: bool,

    /// Find the master through this Sentinel
    ///
    /// HOST or HOST:PORT (port 26379 when omitted), or a URL with the Sentinel's own
    /// credentials and TLS: redis://USER:PASSWORD@HOST:PORT (all but the host optional), or
    /// rediss://… Repeat it. --redis-url then only gives the master's scheme, credentials and
    /// database [env: REDLOCK_SENTINEL, the Sentinels separated by commas].
    #[arg(long, value_name = "HOST[:PORT]|URL", help_heading = "Redis connection")]
    pub sentinel: Vec<String>,

    /// Name of the master the Sentinels watch
    #[arg(long, env = "REDLOCK_SENTINEL_MASTER", value_name = "NAME", help_heading = "Redis connection")]
    pub sentinel_master: Option<String>,

    /// The Sentinels' password, from a file
    ///
    /// Its first line; for every --sentinel whose address carries no password of its own [the
    /// password can also come from REDLOCK_SENTINEL_PASSWORD].
    #[arg(
        long,
        env = "REDLOCK_SENTINEL_PASSWORD_FILE",
        value_name = "PATH",
        help_heading = "Redis connection"
    )]
    pub sentinel_password_file: Option<PathBuf>,

    /// Talk to a Redis Cluster
    ///
    /// The --redis-url values are its seed nodes.
    #[arg(
        long,
        env = "REDLOCK_CLUSTER",
        value_parser = switch("REDLOCK_CLUSTER"),
        conflicts_with = "sentinel",
        help_heading = "Redis connection",
    )]
    pub cluster: bool,

    /// Bound on connecting to Redis
    ///
    /// Default: from the lease, at most 5s.
    #[arg(
        long,
        env = "REDLOCK_CONNECT_TIMEOUT",
        value_name = "DUR",
        allow_negative_numbers = true,
        help_heading = "Redis connection"
    )]
    pub connect_timeout: Option<String>,

    /// Bound on each Redis request
    ///
    /// Default: from the lease, at most 2s.
    #[arg(
        long,
        env = "REDLOCK_COMMAND_TIMEOUT",
        value_name = "DUR",
        allow_negative_numbers = true,
        help_heading = "Redis connection"
    )]
    pub command_timeout: Option<String>,
}

/// Diagnostics on stderr.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// More diagnostics (-v: info, -vv: debug)
    #[arg(short, long, action = ArgAction::Count, help_heading = "Output")]
    pub verbose: u8,

    /// Only errors on stderr
    ///
    /// A busy lock and a run skipped by --idempotency-key print nothing; -v wins over it.
    #[arg(
        short,
        long,
        env = "REDLOCK_QUIET",
        value_parser = switch("REDLOCK_QUIET"),
        help_heading = "Output",
    )]
    pub quiet: bool,

    /// Format of the diagnostics on stderr
    #[arg(
        long,
        env = "REDLOCK_LOG_FORMAT",
        value_name = "FORMAT",
        value_enum,
        default_value_t = LogFormatArg::Text,
        help_heading = "Output",
    )]
    pub log_format: LogFormatArg,
}

/// `--generate` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Generate {
    /// The man page redlock-run(1)
    Man,
    /// The man page redlock-run-status(1)
    ManStatus,
    /// The man page redlock-run-release(1)
    ManRelease,
    /// The man page redlock-run-lock(1)
    ManLock,
    /// The man page redlock-run-unlock(1)
    ManUnlock,
    /// Completion for bash
    Bash,
    /// Completion for zsh (a file named _redlock-run in $fpath)
    Zsh,
    /// Completion for fish
    Fish,
    /// Completion for elvish
    Elvish,
    /// Completion for PowerShell
    Powershell,
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// `redlock-run: level: message field=value …`
    Text,
    /// One JSON object per line, for log collectors (Kubernetes)
    Json,
}

/// The parser of an on/off switch set through the environment variable `var`: only the words
/// docs/GUIDE.md lists, in any case, so that a typo never turns a switch on (or off) silently.
/// Empty is off. (On the command line a switch takes no value.)
fn switch(var: &'static str) -> impl Fn(&str) -> Result<bool, String> + Clone + Send + Sync + 'static {
    move |value| match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "" | "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{var} must be one of 1, true, yes, on (on) or 0, false, no, off, empty (off)")),
    }
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
