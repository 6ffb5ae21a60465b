//! The command line, as clap sees it. Help text lives here; validation lives in `config/`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgAction, Args, FromArgMatches, Parser, Subcommand, ValueEnum};

pub mod generate;
mod parse;

pub use parse::{Stop, means_lock, starts_with_subcommand, value_from_variable};

/// The epilogue of `-h`: where the rest is.
const AFTER_SHORT_HELP: &str = "\
Durations: 5 or 1.5 (seconds), 500ms, 30m, '1h 30m'. '--help' adds the details,
the environment variables, the exit statuses and examples; so does
'man redlock-run'.";

/// The epilogue of `--help` (and of the man page, which reads its examples from here): the
/// parts around the exit statuses, which `exit.rs` words.
fn after_help() -> String {
    format!("{DURATIONS_AND_VARIABLES}\n\n{}\n\n{EXAMPLES}", crate::exit::summary())
}

const DURATIONS_AND_VARIABLES: &str = "\
Durations use humantime syntax (500ms, 30s, 30m, '1h 30m'), or are a bare number of seconds
(5, 1.5), as for sleep(1); none is negative or longer than 10 years; --wait also takes forever.
Every option but -v, --generate and --allow-interactive can also be set with an environment variable
REDLOCK_<NAME> (shown in brackets); a flag on the command line wins over the environment.";

const EXAMPLES: &str = "\
Examples:
  redlock-run --key lock:settlement:daily --ttl 30m -- ./settle.sh
  redlock-run -k lock:deploy -t 5m --wait 20m --redis-url redis://redis.internal:6379 -- make deploy
  redlock-run --key lock:backup --limit 2 --wait 1h -- /opt/backup/run
  redlock-run --key lock:env:staging --shared --wait 30m -- ./run-tests.sh
  redlock-run --key lock:db:orders --key lock:cache:orders --wait 30m -- ./migrate.sh
  redlock-run status --key lock:settlement:daily
  redlock-run release --key lock:settlement:daily --force
  eval \"$(redlock-run lock --key lock:backup --ttl 1m)\" || exit   (in a script: the rest of it)";

/// The sections of `--help` the options are listed under.
mod heading {
    pub const LOCK: &str = "Lock";
    pub const WAITING: &str = "Waiting";
    pub const SUPERVISION: &str = "Command supervision";
    pub const REDIS: &str = "Redis connection";
    pub const OUTPUT: &str = "Output";
}

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
    after_long_help = after_help(),
    max_term_width = 100,
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub action: Option<SubcommandArg>,

    #[command(flatten)]
    pub run: RunArgs,

    /// Print a man page or a completion script, and exit
    ///
    /// The docs of this very binary, for a copied one: 'redlock-run --generate man >
    /// /usr/local/share/man/man1/redlock-run.1', 'redlock-run --generate bash >
    /// /usr/share/bash-completion/completions/redlock-run'. No environment variable: a run never
    /// turns into this.
    #[arg(long, value_name = "KIND", value_enum, exclusive = true, help_heading = heading::OUTPUT)]
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
        help_heading = heading::LOCK
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
        help_heading = heading::LOCK,
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
        help_heading = heading::LOCK
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
        help_heading = heading::LOCK,
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
        help_heading = heading::LOCK
    )]
    pub min_hold: Option<String>,

    /// Succeed at most once per ID
    ///
    /// Skip (exit 0) if a run with this ID already succeeded; record success after exit 0.
    #[arg(long, env = "REDLOCK_IDEMPOTENCY_KEY", value_name = "ID", help_heading = heading::LOCK)]
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
        help_heading = heading::LOCK
    )]
    pub idempotency_ttl: String,

    /// A label stored with the holder (a job's URL)
    ///
    /// Shown wherever the holder is named: another run's busy message, status, this run's log
    /// lines. At most 200 bytes, no control or invisible characters; blank is none. Stored in
    /// Redis in plain text, readable by anyone who can read the key: never a secret.
    #[arg(long, env = "REDLOCK_NOTE", value_name = "TEXT", help_heading = heading::LOCK)]
    pub note: Option<OsString>,

    /// How long to wait for a busy lock; 0 = fail at once
    ///
    /// 'forever' waits without a limit, as flock(1) does without -w, and so does an outage of
    /// Redis at the start (then --fail-open cannot be used); a signal still ends the wait. On a
    /// terminal, a line on stderr shows who holds the lock, the place in the queue, the time left.
    #[arg(
        short,
        long,
        env = "REDLOCK_WAIT",
        value_name = "DUR",
        allow_negative_numbers = true,
        default_value = "0",
        help_heading = heading::WAITING
    )]
    pub wait: String,

    /// Sleep a random part of DUR before the first attempt
    ///
    /// Spreads a fleet started by the same cron minute over DUR, as systemd's
    /// RandomizedDelaySec does: the run sleeps a uniformly random time in [0, DUR) before it
    /// connects to Redis. --wait counts from the first attempt, after the sleep. A signal during
    /// the sleep ends the run at once, with no lock taken (exit 128+N).
    #[arg(
        long,
        env = "REDLOCK_JITTER",
        value_name = "DUR",
        allow_negative_numbers = true,
        help_heading = heading::WAITING
    )]
    pub jitter: Option<String>,

    /// Run without a lock if Redis is unreachable
    ///
    /// If Redis cannot be reached at start, run the command anyway, without a lock (loud
    /// warning). Never when Redis answered (out of memory, read-only, loading) or on a
    /// configuration mistake.
    #[arg(
        long,
        env = "REDLOCK_FAIL_OPEN",
        value_parser = switch("REDLOCK_FAIL_OPEN"),
        help_heading = heading::WAITING,
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
        help_heading = heading::SUPERVISION
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
        help_heading = heading::SUPERVISION
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
        help_heading = heading::SUPERVISION,
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
        help_heading = heading::SUPERVISION
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
        help_heading = heading::SUPERVISION,
    )]
    pub no_new_privs: bool,

    #[command(flatten)]
    pub redis: RedisArgs,

    /// Write Prometheus metrics to PATH at exit
    ///
    /// Text format, written atomically, for the node_exporter textfile collector.
    #[arg(long, env = "REDLOCK_METRICS_FILE", value_name = "PATH", help_heading = heading::OUTPUT)]
    pub metrics_file: Option<PathBuf>,

    #[command(flatten)]
    pub output: OutputArgs,
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
pub enum SubcommandArg {
    /// Show who holds the lock; exit 0 when held, 1 when free
    ///
    /// Also when the holder's run started (its wait included), the TTL left, the fence and the
    /// idempotency records.
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
    /// script's exit. A script that does not lead its process group (a CI step, sh -c) is
    /// stopped as itself and its descendants instead; setsid -w ./script gives the group
    /// guarantee. Only subshells may stand between the script and lock: not timeout or sh -c.
    /// On failure it prints only `(exit N)`, so that eval fails with a run's status.
    /// A run's options apply, but --idempotency-key, --metrics-file, --no-new-privs and
    /// --busy-exit-code 0.
    Lock(Deferred<Box<LockArgs>>),
    /// Release the lock taken by `lock` in this script
    ///
    /// Finds the holder through REDLOCK_HOLDER; exits 0 once the lock is released, 125 when it
    /// was lost (or its holder is gone), 124 or 128+N when the script is being stopped
    /// (--max-runtime, signal N to the holder), 64 when this script holds no lock, 77 when the
    /// holder is another user's.
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
    #[arg(long, help_heading = heading::SUPERVISION)]
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
/// variant in [`SubcommandArg`]), which the doc comments of the option groups would otherwise replace.
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
        help_heading = heading::LOCK
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
    #[arg(long, value_name = "URL", action = ArgAction::Append, help_heading = heading::REDIS)]
    pub redis_url: Vec<String>,

    /// Read the Redis password from this file
    ///
    /// Its first line, so that the password never sits in argv [the password can also come
    /// from the URL or REDLOCK_PASSWORD].
    #[arg(long, env = "REDLOCK_PASSWORD_FILE", value_name = "PATH", help_heading = heading::REDIS)]
    pub password_file: Option<PathBuf>,

    /// CA certificates (PEM) to verify with
    ///
    /// The server's certificate, and a rediss:// Sentinel's, instead of with the system's
    /// certificates.
    #[arg(long, env = "REDLOCK_TLS_CA_FILE", value_name = "PATH", help_heading = heading::REDIS)]
    pub tls_ca_file: Option<PathBuf>,

    /// Client certificate (PEM) for mutual TLS
    ///
    /// Needs --tls-key-file.
    #[arg(
        long,
        env = "REDLOCK_TLS_CERT_FILE",
        value_name = "PATH",
        requires = "tls_key_file",
        help_heading = heading::REDIS
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
        help_heading = heading::REDIS
    )]
    pub tls_key_file: Option<PathBuf>,

    /// Do not verify the server's certificate
    ///
    /// Nor its host name; a warning says so on every run.
    #[arg(
        long,
        env = "REDLOCK_TLS_INSECURE",
        value_parser = switch("REDLOCK_TLS_INSECURE"),
        help_heading = heading::REDIS,
    )]
    pub tls_insecure: bool,

    /// Find the master through this Sentinel
    ///
    /// HOST or HOST:PORT (port 26379 when omitted), or a URL with the Sentinel's own
    /// credentials and TLS: redis://USER:PASSWORD@HOST:PORT (all but the host optional), or
    /// rediss://… Repeat it. --redis-url then only gives the master's scheme, credentials and
    /// database [env: REDLOCK_SENTINEL, the Sentinels separated by commas].
    #[arg(long, value_name = "HOST[:PORT]|URL", help_heading = heading::REDIS)]
    pub sentinel: Vec<String>,

    /// Name of the master the Sentinels watch
    #[arg(long, env = "REDLOCK_SENTINEL_MASTER", value_name = "NAME", help_heading = heading::REDIS)]
    pub sentinel_master: Option<String>,

    /// The Sentinels' password, from a file
    ///
    /// Its first line; for every --sentinel whose address carries no password of its own [the
    /// password can also come from REDLOCK_SENTINEL_PASSWORD].
    #[arg(
        long,
        env = "REDLOCK_SENTINEL_PASSWORD_FILE",
        value_name = "PATH",
        help_heading = heading::REDIS
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
        help_heading = heading::REDIS,
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
        help_heading = heading::REDIS
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
        help_heading = heading::REDIS
    )]
    pub command_timeout: Option<String>,
}

/// Diagnostics on stderr.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// More diagnostics (-v: info, -vv: debug)
    #[arg(short, long, action = ArgAction::Count, help_heading = heading::OUTPUT)]
    pub verbose: u8,

    /// Only errors on stderr
    ///
    /// A busy lock and a run skipped by --idempotency-key print nothing; -v wins over it.
    #[arg(
        short,
        long,
        env = "REDLOCK_QUIET",
        value_parser = switch("REDLOCK_QUIET"),
        help_heading = heading::OUTPUT,
    )]
    pub quiet: bool,

    /// Format of the diagnostics on stderr
    #[arg(
        long,
        env = "REDLOCK_LOG_FORMAT",
        value_name = "FORMAT",
        value_enum,
        default_value_t = LogFormatArg::Text,
        help_heading = heading::OUTPUT,
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
